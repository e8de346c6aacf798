// Built only where libpng is linked in (CMakeLists.txt's GPUDECODE_STATIC_PNG).
//
// Debian's libpng16.a is compiled as position-independent executable code, not as code for a
// shared object: its pngerror.o reads libc's `stderr` with a PC-relative load, which the
// linker cannot point at a symbol of another shared object. A hidden definition of the
// pointer in this module gives that load a target it can reach; it is set to libc's own
// before anything runs, so libpng's default message functions (never reached here: the
// decoder sets its own) would write where they always do.
//
// No <stdio.h> in this file: it declares `stderr` with another type.
#include <dlfcn.h>

extern "C" {
__attribute__((visibility("hidden"))) void* stderr = nullptr;
}

namespace {
__attribute__((constructor)) void take_libcs_stderr() {
  // RTLD_DEFAULT does not see hidden symbols, so this is libc's `stderr`, not the one above
  void* const* libcs = static_cast<void* const*>(dlsym(RTLD_DEFAULT, "stderr"));
  if (libcs != nullptr) stderr = *libcs;
}
}  // namespace
