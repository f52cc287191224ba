#include "store/store.h"

namespace gpupool {

std::string_view StorageHolderKindName(StorageHolderKind k) {
  return k == StorageHolderKind::kGroup ? "group" : "user";
}

Result<StorageHolderKind> ParseStorageHolderKind(std::string_view name) {
  if (name == "user") return StorageHolderKind::kUser;
  if (name == "group") return StorageHolderKind::kGroup;
  return Status::InvalidArgument("must be \"user\" or \"group\", got \"" + std::string(name) +
                                 "\"");
}

}  // namespace gpupool
