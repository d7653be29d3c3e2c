#include "common/exec_frames.h"

#include <fmt/format.h>

#include <charconv>

namespace tessera::exec {

std::string Encode(Frame type, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  out += static_cast<char>(type);
  const auto n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
  out.append(payload);
  return out;
}

std::optional<std::pair<int, int>> ParseSize(std::string_view payload) {
  const size_t space = payload.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  int cols = 0, rows = 0;
  const std::string_view a = payload.substr(0, space), b = payload.substr(space + 1);
  const auto ra = std::from_chars(a.data(), a.data() + a.size(), cols);
  const auto rb = std::from_chars(b.data(), b.data() + b.size(), rows);
  if (ra.ec != std::errc() || ra.ptr != a.data() + a.size() || rb.ec != std::errc() ||
      rb.ptr != b.data() + b.size() || cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
    return std::nullopt;
  }
  return std::make_pair(cols, rows);
}

Result<std::optional<std::pair<Frame, std::string>>> FrameReader::Next() {
  if (buffer_.size() - at_ < 5) {
    if (at_ > 0) {
      buffer_.erase(0, at_);
      at_ = 0;
    }
    return std::optional<std::pair<Frame, std::string>>();
  }
  const char type = buffer_[at_];
  switch (static_cast<Frame>(type)) {
    case Frame::kStdin:
    case Frame::kStdinEnd:
    case Frame::kResize:
    case Frame::kStdout:
    case Frame::kStderr:
    case Frame::kExit:
      break;
    default:
      return Status::InvalidArgument(
          fmt::format("exec stream: frame type 0x{:02x} is unknown", static_cast<uint8_t>(type)));
  }
  uint32_t n = 0;
  for (size_t i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(buffer_[at_ + i]);
  if (n > kMaxPayload) {
    return Status::InvalidArgument(
        fmt::format("exec stream: a frame of {} bytes is over {}", n, kMaxPayload));
  }
  if (buffer_.size() - at_ - 5 < n) return std::optional<std::pair<Frame, std::string>>();
  std::pair<Frame, std::string> frame{static_cast<Frame>(type), buffer_.substr(at_ + 5, n)};
  at_ += 5 + n;
  if (at_ == buffer_.size()) {
    buffer_.clear();
    at_ = 0;
  }
  return std::optional<std::pair<Frame, std::string>>(std::move(frame));
}

}  // namespace tessera::exec
