#include "accounting/records.h"

namespace gpupool::accounting {

std::string GroupAccount(std::string_view group) { return "group:" + std::string(group); }
std::string UserAccount(std::string_view user) { return "user:" + std::string(user); }
std::string JobAccount(std::string_view owner, std::string_view group) {
  return group.empty() || group == kNoGroup ? UserAccount(owner) : GroupAccount(group);
}

Status CheckAccountName(std::string_view account) {
  if (account == kPoolAccount) return Status::Ok();
  for (std::string_view prefix : {"group:", "user:"}) {
    if (account.substr(0, prefix.size()) == prefix && account.size() > prefix.size()) {
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("account: \"" + std::string(account) +
                                 "\" is not group:NAME, user:NAME or pool");
}

std::string_view PricedResourceName(PricedResource r) {
  switch (r) {
    case PricedResource::kGpu:
      return "gpu";
    case PricedResource::kCpu:
      return "cpu";
    case PricedResource::kMemory:
      return "memory";
    case PricedResource::kStorage:
      return "storage";
  }
  return "gpu";
}

Result<PricedResource> ParsePricedResource(std::string_view name) {
  for (PricedResource r : {PricedResource::kGpu, PricedResource::kCpu, PricedResource::kMemory,
                           PricedResource::kStorage}) {
    if (PricedResourceName(r) == name) return r;
  }
  return Status::InvalidArgument("resource: \"" + std::string(name) +
                                 "\" is not one of gpu, cpu, memory, storage");
}

std::string_view EntryKindName(EntryKind k) {
  switch (k) {
    case EntryKind::kCharge:
      return "charge";
    case EntryKind::kLending:
      return "lending";
    case EntryKind::kGrant:
      return "grant";
  }
  return "charge";
}

Result<EntryKind> ParseEntryKind(std::string_view name) {
  for (EntryKind k : {EntryKind::kCharge, EntryKind::kLending, EntryKind::kGrant}) {
    if (EntryKindName(k) == name) return k;
  }
  return Status::InvalidArgument("kind: \"" + std::string(name) +
                                 "\" is not one of charge, lending, grant");
}

std::string_view BudgetActionName(BudgetAction a) {
  return a == BudgetAction::kStop ? "stop" : "hold";
}

Result<BudgetAction> ParseBudgetAction(std::string_view name) {
  if (name == "hold") return BudgetAction::kHold;
  if (name == "stop") return BudgetAction::kStop;
  return Status::InvalidArgument("action: \"" + std::string(name) +
                                 "\" is not hold (new jobs wait) or stop (running jobs "
                                 "checkpoint, stop and wait too)");
}

}  // namespace gpupool::accounting
