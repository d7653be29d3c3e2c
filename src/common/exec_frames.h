// The frames a client and an agent exchange in an exec session (docs/volumes.md, "A shell"),
// over the stream the server joins between them: a type byte, the payload's length as 4 bytes
// big-endian, then the payload. The client sends input, its end, and the terminal's size; the
// agent sends output (stdout and stderr apart without a TTY) and, last, the exit code.
// Thread-safety: FrameReader is used by one thread; the functions are pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"

namespace tessera::exec {

// What the client's and the agent's connections upgrade to (Upgrade: ...).
inline constexpr char kProtocol[] = "tessera-exec.v1";

enum class Frame : char {
  kStdin = 'i',     // Client: bytes for the command's input.
  kStdinEnd = 'e',  // Client: no more input (the command reads end of file).
  kResize = 'r',    // Client: the terminal's size, "COLS ROWS".
  kStdout = 'o',    // Agent: the command's output (all of it under a TTY).
  kStderr = 'E',    // Agent: the command's error output (without a TTY).
  kExit = 'x',      // Agent, last: the exit code in decimal (128+N for signal N).
};

inline constexpr size_t kMaxPayload = 1 << 20;

std::string Encode(Frame type, std::string_view payload);
// "COLS ROWS" into a size, each 1..1000; nullopt when malformed.
std::optional<std::pair<int, int>> ParseSize(std::string_view payload);

// Cuts a byte stream into frames.
class FrameReader {
 public:
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next whole frame; nullopt while none is whole. InvalidArgument for an unknown type or a
  // payload over kMaxPayload: the stream is then broken.
  Result<std::optional<std::pair<Frame, std::string>>> Next();

 private:
  std::string buffer_;
  size_t at_ = 0;  // Where the next frame begins in buffer_.
};

}  // namespace tessera::exec
