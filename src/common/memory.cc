#include "common/memory.h"

#include <malloc.h>

namespace tessera {

void KeepLargeBuffersMapped() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace tessera
