/* Callgrind's client request to start instrumenting (`--instr-atstart=no` until then), from valgrind's own
   header: the instruction budget's binaries run their setup (the masker's ~220 patterns compiled, ~580 M
   instructions) uninstrumented, about 4x faster under valgrind, and start instrumenting just before the calls
   they count. Outside valgrind the request is a few no-op instructions. Built only with the benches' feature
   `callgrind` (build.rs). */
#include <valgrind/callgrind.h>

void airlock_callgrind_start_instrumentation(void) {
  CALLGRIND_START_INSTRUMENTATION;
}
