#include "server/node_control_api.h"

#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "server/http_errors.h"

namespace gpupool::server {

using nlohmann::json;

void NodeControlApi::AddRoutes(ApiRoutes& t) {
  for (const char* command : {"pause", "resume", "reclaim"}) {
    t.Add("POST", std::string("/v1/nodes/{node}/") + command, Access::kHandlerAuthorizes,
          Action::kNodeManage,
          [this, command](net::HttpRequest& req, const Principal& who, const PathParams& params,
                          Respond respond) {
            Command(req, who, params.find("node")->second, command, respond);
          });
  }
}

void NodeControlApi::Command(const net::HttpRequest& req, const Principal& who,
                             const std::string& node, const std::string& command, Respond respond) {
  auto fail = [&](const Status& s) { (*respond)(ErrorResponse(s)); };
  // The provider who enrolled the node, or an admin. A node with no
  // enrollment (a development pool's agents) has no owner but the admins.
  auto cred = auth_.GetAgentCredential(node);
  if (!cred.ok()) return fail(cred.status());
  std::string owner = *cred ? (*cred)->owner : std::string();
  if (Status s = Authorize(who, Action::kNodeManage, {owner}); !s.ok()) return fail(s);
  proto::OwnerCommand c;
  c.command = command;
  c.by = who.subject;
  if (command == "reclaim" && !req.body.empty()) {
    auto body = ParseJsonObject(req.body, "request body");
    if (!body.ok()) return fail(body.status());
    JsonReader r(*body, "");
    c.gpus = r.StrList("gpus", false, 256);
    c.now = r.Bool("now", false, false);
    if (Status s = r.Finish(); !s.ok()) return fail(s);
  }
  std::string detail = command;
  if (!c.gpus.empty()) detail += " of GPUs " + json(c.gpus).dump();
  if (c.now) detail += " at once";
  if (Status s = pool_.SendOwnerCommand(node, c); !s.ok()) {
    auth_.Audit(who.subject, "node." + command, node, s.message(), req.peer, false);
    return fail(s);
  }
  auth_.Audit(who.subject, "node." + command, node, detail, req.peer);
  (*respond)(JsonResponse(
      202,
      {{"node", node}, {"command", command}, {"gpus", c.gpus}, {"now", c.now}, {"sent", true}}));
}

}  // namespace gpupool::server
