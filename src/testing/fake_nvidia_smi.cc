// A fake nvidia-smi for tests, built beside the fake libnvidia-ml.so.1 (fake_nvml.cc). It knows
// one command, the GPU reset that applies a pending MIG mode:
//   nvidia-smi --gpu-reset -i N      (or -r; -i N, --id N or --id=N, in any order)
// It loads the libnvidia-ml.so.1 in its own folder, initializes it (so it reads
// $TESSERA_FAKE_NVML_CONFIG and $TESSERA_FAKE_NVML_STATE as any process would) and calls the
// fake's tesseraFakeNvmlResetGpu, which writes the result to the state file, where the other
// processes using the fake see it. It prints what the real one prints on success,
// "GPU 00000000:10:00.0 was successfully reset.", and exits 0; otherwise it says why on stderr and
// exits with nvidia-smi's code for the failure (2 for a bad argument, 6 for no such GPU, 255 for
// a GPU in use and other errors).
// Thread-safety: a single-threaded program.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agent/nvml_api.h"

namespace nv = tessera::agent::nvml;

namespace {

constexpr int kExitBadArgument = 2;
constexpr int kExitNotFound = 6;
constexpr int kExitLibraryNotFound = 12;
constexpr int kExitOther = 255;

// nvidia-smi's exit status for an NVML error: the NVML code itself for the few it documents,
// 255 for the rest.
int ExitCode(nv::nvmlReturn_t r) {
  for (int documented : {2, 3, 4, 6, 8, 9, 10, 12, 13, 14, 15}) {
    if (r == documented) return documented;
  }
  return kExitOther;
}

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "nvidia-smi (Tessera's fake): %s\n"
               "usage: nvidia-smi --gpu-reset -i N   (or -r -i N)\n",
               problem.c_str());
  return kExitBadArgument;
}

// The folder this program is in, from /proc/self/exe.
std::string OwnDir() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return ".";
  std::string exe(path.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

bool ParseIndex(std::string_view text, unsigned int& index) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("0123456789") != text.npos) {
    return false;
  }
  index = static_cast<unsigned int>(std::stoul(std::string(text)));
  return true;
}

template <typename Fn>
bool Find(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) std::fprintf(stderr, "nvidia-smi: the fake NVML lacks %s\n", name);
  return fn != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  bool reset = false;
  bool have_index = false;
  unsigned int index = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view value;
    if (arg == "-r" || arg == "--gpu-reset") {
      reset = true;
      continue;
    }
    if (arg == "-i" || arg == "--id") {
      if (i + 1 == argc) return Usage(std::string(arg) + " needs a GPU index");
      value = argv[++i];
    } else if (arg.substr(0, 5) == "--id=") {
      value = arg.substr(5);
    } else {
      return Usage("unknown argument '" + std::string(arg) + "'");
    }
    if (!ParseIndex(value, index)) {
      return Usage("'" + std::string(value) + "' is not a GPU index (0, 1, ...)");
    }
    have_index = true;
  }
  if (!reset) return Usage("only --gpu-reset (-r) is supported");
  if (!have_index) return Usage("name the GPU to reset with -i N");
  if (std::getenv("TESSERA_FAKE_NVML_STATE") == nullptr) {
    std::fprintf(stderr,
                 "nvidia-smi (Tessera's fake): TESSERA_FAKE_NVML_STATE is not set, so a reset "
                 "here would reach no other process\n");
    return kExitOther;
  }

  const std::string library = OwnDir() + "/libnvidia-ml.so.1";
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "NVML Shared Library Not Found: %s\n", dlerror());
    return kExitLibraryNotFound;
  }
  nv::nvmlInit_fn init = nullptr;
  nv::nvmlShutdown_fn shutdown = nullptr;
  nv::nvmlErrorString_fn error_string = nullptr;
  nv::nvmlDeviceGetCount_fn get_count = nullptr;
  nv::nvmlDeviceGetHandleByIndex_fn get_handle = nullptr;
  nv::nvmlDeviceGetPciInfo_fn get_pci = nullptr;
  nv::nvmlReturn_t (*reset_gpu)(unsigned int) = nullptr;
  if (!Find(lib, "nvmlInit_v2", init) || !Find(lib, "nvmlShutdown", shutdown) ||
      !Find(lib, "nvmlErrorString", error_string) ||
      !Find(lib, "nvmlDeviceGetCount_v2", get_count) ||
      !Find(lib, "nvmlDeviceGetHandleByIndex_v2", get_handle) ||
      !Find(lib, "nvmlDeviceGetPciInfo_v3", get_pci) ||
      !Find(lib, "tesseraFakeNvmlResetGpu", reset_gpu)) {
    return kExitOther;
  }
  if (nv::nvmlReturn_t r = init(); r != nv::NVML_SUCCESS) {
    std::fprintf(stderr, "Failed to initialize NVML: %s\n", error_string(r));
    return ExitCode(r);
  }
  unsigned int count = 0;
  nv::nvmlDevice_t dev = nullptr;
  nv::nvmlPciInfo_t pci{};
  if (get_count(&count) != nv::NVML_SUCCESS || index >= count) {
    std::fprintf(stderr, "No GPU with index %u: this node has %u GPUs\n", index, count);
    shutdown();
    return kExitNotFound;
  }
  if (get_handle(index, &dev) == nv::NVML_SUCCESS) (void)get_pci(dev, &pci);
  const nv::nvmlReturn_t r = reset_gpu(index);
  shutdown();
  if (r == nv::NVML_ERROR_IN_USE) {
    std::fprintf(stderr,
                 "The following GPUs could not be reset:\n"
                 "  GPU %s: In use by another client\n\n"
                 "1 device is currently being used by one or more other processes (e.g., a CUDA "
                 "application). Please first kill all processes using this device.\n",
                 pci.busId);
    return kExitOther;
  }
  if (r != nv::NVML_SUCCESS) {
    std::fprintf(stderr, "Unable to reset GPU %s: %s\n", pci.busId, error_string(r));
    return ExitCode(r);
  }
  std::printf("GPU %s was successfully reset.\n", pci.busId);
  return 0;
}
