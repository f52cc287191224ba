#include "cli/agent_control.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "agent/control_socket.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/units.h"

namespace gpupool::cli {
namespace {

using nlohmann::json;

// How long a command may take: a graceful reclaim waits for the grace
// period, a leave for every running job to finish.
constexpr int64_t kQuickMs = 10'000;
constexpr int64_t kReclaimMs = 2 * 3600 * 1000;
constexpr int64_t kLeaveMs = int64_t{30} * 24 * 3600 * 1000;

// The string at `key`; "" when it is absent or not a string.
std::string StringAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

void PrintStatus(const json& s) {
  std::cout << "node " << StringAt(s, "node")
            << (StringAt(s, "node_id").empty() ? "" : " (" + StringAt(s, "node_id") + ")") << ", "
            << (s.value("connected", false) ? "connected to " : "not connected to ")
            << StringAt(s, "server") << "\n";
  std::string mode = StringAt(s, "mode");
  std::cout << "lending: " << mode
            << (mode == "closed"    ? " (outside the availability windows)"
                : mode == "paused"  ? " (no new work; `gpupool agent resume` lends again)"
                : mode == "leaving" ? " (draining, then it deregisters)"
                                    : "")
            << "\n";
  if (s.contains("lending") && s["lending"].is_object()) {
    std::string sharing = StringAt(s["lending"], "sharing");
    std::cout << "GPU shares: "
              << (sharing == "none"  ? "none (whole GPUs only)"
                  : sharing == "mps" ? "through MPS (one user per GPU at a time)"
                                     : "held by libgpushare.so")
              << "\n";
  }
  int64_t next = s.value("next_change_ms", int64_t{0});
  if (next > 0) std::cout << "next window change: " << FormatTimestampMs(next) << "\n";
  if (s.contains("gpus") && !s["gpus"].empty()) {
    Table t({"GPU", "UUID", "MODEL", "LENT"});
    for (const json& g : s["gpus"]) {
      std::string lent = g.contains("lent_mib")
                             ? "yes (" + FormatMebibytes(g["lent_mib"].get<int64_t>()) + ")"
                             : "no: " + StringAt(g, "not_lent");
      t.Add({std::to_string(g.value("index", 0)), StringAt(g, "uuid"), StringAt(g, "name"), lent});
    }
    t.Print(std::cout);
  } else {
    std::cout << "no GPUs (lends CPU only)\n";
  }
  if (s.contains("tasks") && !s["tasks"].empty()) {
    Table t({"ATTEMPT", "JOB", "GPUS", "STATE"});
    for (const json& task : s["tasks"]) {
      std::string gpus;
      for (const json& g : task["gpus"]) gpus += (gpus.empty() ? "" : ",") + g.get<std::string>();
      t.Add({StringAt(task, "attempt_id"), std::to_string(task.value("job_id", int64_t{0})),
             gpus.empty() ? "-" : gpus,
             task.contains("finishing")  ? "exited, shipping its last checkpoint"
             : task.contains("vacating") ? "vacating: " + StringAt(task, "vacating")
                                         : "running"});
    }
    t.Print(std::cout);
  } else {
    std::cout << "no pool work running\n";
  }
  std::cout << "policy (" << StringAt(s, "policy_source") << "):\n";
  if (s.contains("policy") && s["policy"].is_object()) {
    for (const auto& [key, value] : s["policy"].items()) {
      std::cout << "  " << key << ": " << value.dump() << "\n";
    }
  }
}

}  // namespace

int RunAgentControl(const AgentControlFlags& flags) {
  json request = {{"command", flags.command}};
  int64_t timeout = kQuickMs;
  if (flags.command == "reclaim") {
    request["gpus"] = flags.gpus;
    request["now"] = flags.now;
    timeout = kReclaimMs;
  } else if (flags.command == "leave") {
    timeout = kLeaveMs;
  } else if (flags.command == "policy" && !flags.policy_file.empty()) {
    auto text = ReadFile(flags.policy_file);
    if (!text.ok()) {
      std::cerr << "gpupool agent policy: " << text.status().message() << "\n";
      return 2;
    }
    request["yaml"] = *text;
  }
  std::string socket = agent::ControlSocketPath(flags.data_dir);
  auto response = agent::CallControl(socket, request, timeout);
  if (!response.ok()) {
    std::cerr << "gpupool agent " << flags.command << ": " << response.status().message() << "\n";
    return 2;
  }
  const json& r = *response;
  bool ok = r.value("ok", false);
  if (!ok) {
    std::cerr << "gpupool agent " << flags.command << ": " << StringAt(r, "error") << "\n";
    return 1;
  }
  if (flags.command == "status") {
    if (flags.json) {
      std::cout << r.dump(2) << "\n";
    } else {
      PrintStatus(r);
    }
    return 0;
  }
  std::cout << StringAt(r, "message") << "\n";
  return 0;
}

}  // namespace gpupool::cli
