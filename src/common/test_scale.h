#pragma once

// How many rounds a randomized (property) test runs. The sanitizer build
// runs the same checks on fewer seeds: its code is unoptimized and
// instrumented, 10 to 20 times slower, and the normal build has already run
// every seed of the same test. A sanitizer finds a memory error on the
// first seed that reaches the code as well as on the sixth.
namespace gpupool {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

constexpr int TestRounds(int normal, int sanitized) { return kSanitizedBuild ? sanitized : normal; }

}  // namespace gpupool
