// A fake nvidia-smi for tests, built beside the fake libnvidia-ml.so.1 (fake_nvml.cc). It knows
// two commands: the GPU reset that applies a pending MIG mode, and an operator's MIG device:
//   nvidia-smi --gpu-reset -i N      (or -r; -i N, --id N or --id=N, in any order)
//   nvidia-smi mig -i N -cgi PROFILE_ID[:START] [-C]
// The second makes a GPU instance of that profile id (at START, else where the driver puts it)
// and, with -C, its compute instance over all of it, through the NVML calls an operator's
// nvidia-smi makes; it prints the real tool's "Successfully created ..." lines.
// It loads the libnvidia-ml.so.1 in its own folder, initializes it (so it reads
// $TESSERA_FAKE_NVML_CONFIG and $TESSERA_FAKE_NVML_STATE as any process would) and acts on it;
// the result goes to the state file, where the other processes using the fake see it. A reset
// prints what the real one prints on success, "GPU 00000000:10:00.0 was successfully reset.";
// either exits 0, or says why on stderr and exits with nvidia-smi's code for the failure (2 for a
// bad argument, 6 for no such GPU, 255 for a GPU in use and other errors).
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
               "usage: nvidia-smi --gpu-reset -i N   (or -r -i N)\n"
               "       nvidia-smi mig -i N -cgi PROFILE_ID[:START] [-C]\n",
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

// `nvidia-smi mig -cgi ID[:START] [-C]` on GPU `dev`: a GPU instance and, with `with_ci`, its
// compute instance over all of it. The exit status.
int MakeMigDevice(void* lib, nv::nvmlDevice_t dev, unsigned int index, unsigned int profile_id,
                  long start, bool with_ci, nv::nvmlErrorString_fn error_string) {
  nv::nvmlDeviceGetGpuInstanceProfileInfo_fn gi_profile = nullptr;
  nv::nvmlDeviceCreateGpuInstanceWithPlacement_fn create_at = nullptr;
  nv::nvmlDeviceGetGpuInstancePossiblePlacements_fn placements_fn = nullptr;
  nv::nvmlReturn_t (*create_gi)(nv::nvmlDevice_t, unsigned int, nv::nvmlGpuInstance_t*) = nullptr;
  nv::nvmlGpuInstanceGetInfo_fn gi_info = nullptr;
  nv::nvmlGpuInstanceGetComputeInstanceProfileInfo_fn ci_profile = nullptr;
  nv::nvmlGpuInstanceCreateComputeInstance_fn create_ci = nullptr;
  if (!Find(lib, "nvmlDeviceGetGpuInstanceProfileInfo", gi_profile) ||
      !Find(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", create_at) ||
      !Find(lib, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", placements_fn) ||
      !Find(lib, "nvmlDeviceCreateGpuInstance", create_gi) ||
      !Find(lib, "nvmlGpuInstanceGetInfo", gi_info) ||
      !Find(lib, "nvmlGpuInstanceGetComputeInstanceProfileInfo", ci_profile) ||
      !Find(lib, "nvmlGpuInstanceCreateComputeInstance", create_ci)) {
    return kExitOther;
  }
  nv::nvmlGpuInstanceProfileInfo_t profile{};
  bool found = false;
  for (unsigned int i = 0; i < 64 && !found; ++i) {
    const nv::nvmlReturn_t r = gi_profile(dev, i, &profile);
    if (r == nv::NVML_ERROR_INVALID_ARGUMENT) break;
    found = r == nv::NVML_SUCCESS && profile.id == profile_id;
  }
  if (!found) {
    std::fprintf(stderr,
                 "Unable to create a GPU instance on GPU %u using profile %u: Invalid "
                 "Argument\n",
                 index, profile_id);
    return kExitBadArgument;
  }
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlReturn_t r = nv::NVML_SUCCESS;
  if (start >= 0) {
    // The placement's size is the profile's, as the driver lists its placements.
    std::vector<nv::nvmlGpuInstancePlacement_t> placements(8);
    auto count = static_cast<unsigned int>(placements.size());
    r = placements_fn(dev, profile_id, placements.data(), &count);
    const nv::nvmlGpuInstancePlacement_t* at = nullptr;
    for (unsigned int i = 0; r == nv::NVML_SUCCESS && i < count; ++i) {
      if (placements[i].start == static_cast<unsigned int>(start)) at = &placements[i];
    }
    if (r == nv::NVML_SUCCESS && at == nullptr) r = nv::NVML_ERROR_INVALID_ARGUMENT;
    if (r == nv::NVML_SUCCESS) r = create_at(dev, profile_id, at, &gi);
  } else {
    r = create_gi(dev, profile_id, &gi);
  }
  if (r != nv::NVML_SUCCESS) {
    std::fprintf(stderr, "Unable to create a GPU instance on GPU %u using profile %u: %s\n", index,
                 profile_id, error_string(r));
    return ExitCode(r);
  }
  nv::nvmlGpuInstanceInfo_t info{};
  (void)gi_info(gi, &info);
  std::printf("Successfully created GPU instance ID %2u on GPU %2u using profile ID %2u\n", info.id,
              index, profile_id);
  if (!with_ci) return 0;
  for (unsigned int i = 0; i < 64; ++i) {
    nv::nvmlComputeInstanceProfileInfo_t cp{};
    r = ci_profile(gi, i, nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp);
    if (r == nv::NVML_ERROR_INVALID_ARGUMENT) break;
    if (r != nv::NVML_SUCCESS || cp.sliceCount != profile.sliceCount) continue;
    nv::nvmlComputeInstance_t ci = nullptr;
    r = create_ci(gi, cp.id, &ci);
    if (r != nv::NVML_SUCCESS) break;
    std::printf(
        "Successfully created compute instance on GPU %2u GPU instance ID %2u using "
        "profile ID %2u\n",
        index, info.id, cp.id);
    return 0;
  }
  std::fprintf(stderr, "Unable to create a compute instance on GPU %u GPU instance ID %u: %s\n",
               index, info.id, error_string(r));
  return ExitCode(r);
}

int main(int argc, char** argv) {
  bool reset = false, mig = false, with_ci = false;
  bool have_index = false;
  unsigned int index = 0;
  long profile_id = -1, start = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view value;
    if (arg == "-r" || arg == "--gpu-reset") {
      reset = true;
      continue;
    }
    if (arg == "mig" && i == 1) {
      mig = true;
      continue;
    }
    if (mig && arg == "-C") {
      with_ci = true;
      continue;
    }
    if (mig && arg == "-cgi") {
      if (i + 1 == argc) return Usage("-cgi needs a profile id");
      const std::string spec = argv[++i];
      const size_t colon = spec.find(':');
      unsigned int id = 0, at = 0;
      if (!ParseIndex(spec.substr(0, colon), id) ||
          (colon != std::string::npos && !ParseIndex(spec.substr(colon + 1), at))) {
        return Usage("'" + spec + "' is not PROFILE_ID[:START]");
      }
      profile_id = id;
      if (colon != std::string::npos) start = at;
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
  if (!reset && !mig) return Usage("only --gpu-reset (-r) and mig -cgi are supported");
  if (mig && profile_id < 0) return Usage("mig: only -cgi PROFILE_ID[:START] [-C] is supported");
  if (!have_index) return Usage(mig ? "name the GPU with -i N" : "name the GPU to reset with -i N");
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
  if (mig) {
    const int code = MakeMigDevice(lib, dev, index, static_cast<unsigned int>(profile_id), start,
                                   with_ci, error_string);
    shutdown();
    return code;
  }
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
