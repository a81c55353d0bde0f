/// \file
/// The library's version (the CMake project version, PROJECT_VERSION), for programs' --version
/// and for services that report what they run.
#pragma once

namespace gt {

/// "MAJOR.MINOR.PATCH", followed by " (CUDA)" or " (CPU only)" for the backends compiled in.
const char* version();

}  // namespace gt
