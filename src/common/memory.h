// Process-wide memory settings for the server.
// Thread-safety: call once at start-up, before other threads allocate.
#pragma once

namespace tessera {

// /metrics at 10,000 GPUs is a 60 MB answer every scrape. glibc would map each such buffer
// afresh and unmap it when freed, paying a page fault per 4 KiB every time (most of the render's
// cost on a VM, where a fault costs ~15 us); served from the heap, and kept there up to 512 MiB
// of free memory, the next scrape reuses pages already mapped.
void KeepLargeBuffersMapped();

}  // namespace tessera
