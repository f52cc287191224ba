// The version of gpupool this binary was built from: agents report it in
// their hello, the server's metrics in gpupool_build_info.
#pragma once

namespace gpupool {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace gpupool
