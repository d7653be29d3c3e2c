#include "testing/testing.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace tessera::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::random_device rd;
  const fs::path base = fs::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path p = base / ("tessera-test-" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p.string();
      return;
    }
  }
  std::abort();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string p = File(name);
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::string SourceDir() {
  if (const char* env = std::getenv("TESSERA_SOURCE_DIR"); env && *env) return env;
  return TESSERA_SOURCE_DIR;
}

std::optional<std::string> DatasetsDir() {
  if (const char* env = std::getenv("TESSERA_DATASETS"); env && *env) {
    if (fs::is_directory(env)) return std::string(env);
    return std::nullopt;
  }
  const fs::path p = fs::path(SourceDir()) / ".." / "shared" / "datasets";
  if (fs::is_directory(p)) return fs::canonical(p).string();
  return std::nullopt;
}

std::string DatasetsMissingMessage() {
  return "public traces not found: put them in ../shared/datasets or set TESSERA_DATASETS "
         "(see README.md, 'Public traces')";
}

std::string TesseraBinary() {
  if (const char* env = std::getenv("TESSERA_BIN"); env && *env) return env;
  return (fs::path(SourceDir()) / "build" / "release" / "tessera").string();
}

CommandResult RunTessera(const std::vector<std::string>& args, const std::string& stdin_text) {
  TempDir io;
  const std::string in_path = io.Write("stdin", stdin_text);
  const std::string out_path = io.File("stdout");
  const std::string err_path = io.File("stderr");
  const std::string bin = TesseraBinary();
  CommandResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(in_path.c_str(), "r", stdin) || !freopen(out_path.c_str(), "w", stdout) ||
        !freopen(err_path.c_str(), "w", stderr)) {
      _exit(127);
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

}  // namespace tessera::testing
