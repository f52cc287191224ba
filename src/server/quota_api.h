// QuotaApi: storage quotas over REST (docs/api.md#storage-quotas):
//
//   GET    /v1/quotas                         standings: an admin sees every
//                                             user and group; others see
//                                             themselves and their labs
//   GET    /v1/quotas/{users|groups}/{name}   one standing (an admin, the user
//                                             itself, a member of the lab)
//   PUT    /v1/quotas/{users|groups}/{name}   {"bytes": N}: set (admins)
//   DELETE /v1/quotas/{users|groups}/{name}   back to the server's default (admins)
//
// Changes are audited ("quota.set", "quota.clear"). Single-threaded: the
// server's event loop.
#pragma once

#include <string_view>

#include "server/api_module.h"
#include "server/auth.h"
#include "server/storage_quotas.h"

namespace gpupool::server {

class QuotaApi : public ApiModule {
 public:
  QuotaApi(Auth& auth, StorageQuotas& quotas) : auth_(auth), quotas_(quotas) {}

  void AddRoutes(ApiRoutes& routes) override;

 private:
  void List(const Principal& who, Respond respond);
  void Get(const Principal& who, const PathParams& params, Respond respond);
  void Set(const net::HttpRequest& req, const Principal& who, const PathParams& params,
           Respond respond);

  Auth& auth_;
  StorageQuotas& quotas_;
};

}  // namespace gpupool::server
