#include "sim/openb.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sched/policies.h"

namespace gpupool::sim {

namespace {

std::vector<std::string> SplitCsvLine(std::string_view line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.emplace_back(line.substr(start));
      return out;
    }
    out.emplace_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

struct CsvTable {
  std::map<std::string, size_t> column;
  struct Row {
    int line = 0;
    std::vector<std::string> cells;
  };
  std::vector<Row> rows;
};

Result<CsvTable> ParseCsv(const std::string& source, const std::string& text,
                          const std::vector<std::string>& required) {
  CsvTable table;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  size_t width = 0;
  bool header = true;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto cells = SplitCsvLine(line);
    if (header) {
      header = false;
      width = cells.size();
      for (size_t i = 0; i < cells.size(); ++i) table.column[cells[i]] = i;
      for (const auto& r : required) {
        if (!table.column.count(r)) {
          return Status::InvalidArgument(source + ":" + std::to_string(line_no) +
                                         ": header lacks column '" + r + "'");
        }
      }
      continue;
    }
    if (cells.size() != width) {
      return Status::InvalidArgument(source + ":" + std::to_string(line_no) + ": expected " +
                                     std::to_string(width) + " fields, found " +
                                     std::to_string(cells.size()));
    }
    table.rows.push_back({line_no, std::move(cells)});
  }
  if (header) return Status::InvalidArgument(source + ":1: empty file, no header");
  return table;
}

Result<int64_t> IntCell(const std::string& source, const CsvTable& t, const CsvTable::Row& row,
                        const std::string& col, int64_t min, int64_t max) {
  const std::string& s = row.cells[t.column.at(col)];
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const std::string where = source + ":" + std::to_string(row.line) + ": column " + col + ": ";
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    return Status::InvalidArgument(where + "'" + s + "' is not an integer");
  }
  if (v < min || v > max) {
    return Status::InvalidArgument(where + std::to_string(v) + " is out of range [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

constexpr int64_t kBig = int64_t{1} << 40;

// Fisher-Yates with the run's generator (the artifact's rand.Shuffle and
// rand.Perm draw uniform permutations too; its generator is Go's, so runs are
// not paired with its runs, only alike in distribution).
template <typename T>
void Shuffle(std::vector<T>& v, sched::Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.Uniform(i)]);
}

}  // namespace

Result<std::vector<OpenbNode>> ParseOpenbNodes(const std::string& source, const std::string& text) {
  GP_ASSIGN_OR_RETURN(CsvTable t,
                      ParseCsv(source, text, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<OpenbNode> out;
  for (const auto& row : t.rows) {
    OpenbNode n;
    n.name = row.cells[t.column["sn"]];
    GP_ASSIGN_OR_RETURN(n.capacity.cpu_milli, IntCell(source, t, row, "cpu_milli", 0, kBig));
    GP_ASSIGN_OR_RETURN(n.capacity.memory_mib, IntCell(source, t, row, "memory_mib", 0, kBig));
    GP_ASSIGN_OR_RETURN(int64_t gpus, IntCell(source, t, row, "gpu", 0, 64));
    n.capacity.model = row.cells[t.column["model"]];
    n.capacity.gpus.assign(static_cast<size_t>(gpus), static_cast<int>(sched::kMilliPerGpu));
    out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<OpenbTask>> ParseOpenbTasks(const std::string& source, const std::string& text) {
  // Only the request columns are required: the trace's multigpu20 file has
  // no gpu_spec (any model) and none of the status and time columns, which
  // the experiment ignores anyway.
  GP_ASSIGN_OR_RETURN(
      CsvTable t,
      ParseCsv(source, text, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  const auto spec_col = t.column.find("gpu_spec");
  std::vector<OpenbTask> out;
  for (const auto& row : t.rows) {
    OpenbTask task;
    task.name = row.cells[t.column["name"]];
    auto& r = task.request;
    GP_ASSIGN_OR_RETURN(r.cpu_milli, IntCell(source, t, row, "cpu_milli", 0, kBig));
    GP_ASSIGN_OR_RETURN(r.memory_mib, IntCell(source, t, row, "memory_mib", 0, kBig));
    GP_ASSIGN_OR_RETURN(int64_t num_gpu, IntCell(source, t, row, "num_gpu", 0, 64));
    GP_ASSIGN_OR_RETURN(int64_t milli, IntCell(source, t, row, "gpu_milli", 0, 1000));
    r.num_gpu = static_cast<int>(num_gpu);
    r.gpu_milli = static_cast<int>(milli);
    if (r.num_gpu > 1 && r.gpu_milli != sched::kMilliPerGpu) {
      return Status::InvalidArgument(source + ":" + std::to_string(row.line) +
                                     ": column gpu_milli: a multi-GPU task must ask for 1000 per "
                                     "GPU, found " +
                                     std::to_string(r.gpu_milli));
    }
    if (r.num_gpu == 1 && r.gpu_milli == 0) {
      return Status::InvalidArgument(source + ":" + std::to_string(row.line) +
                                     ": column gpu_milli: a GPU task must ask for more than 0");
    }
    const std::string spec = spec_col == t.column.end() ? "" : row.cells[spec_col->second];
    if (!spec.empty()) {
      std::string_view rest = spec;
      while (true) {
        const size_t bar = rest.find('|');
        std::string model(rest.substr(0, bar));
        if (!model.empty()) r.gpu_models.push_back(std::move(model));
        if (bar == std::string_view::npos) break;
        rest = rest.substr(bar + 1);
      }
    }
    if (r.num_gpu == 0) r.gpu_milli = 0;
    out.push_back(std::move(task));
  }
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<sched::TaskRequest> InflateTasks(const std::vector<sched::TaskRequest>& tasks,
                                             int64_t target_milli, sched::Rng& rng) {
  std::vector<sched::TaskRequest> out = tasks;
  int64_t demand = 0;
  for (const auto& t : out) demand += t.GpuDemand();
  bool any_gpu = false;  // only GPU tasks end the padding
  for (const auto& t : tasks) any_gpu |= t.GpuDemand() > 0;
  if (demand < target_milli && any_gpu) {
    while (true) {
      // As the artifact's tuneUpPods (pkg/simulator/simulator.go): the stop
      // test adds the pod's per-GPU milli, the total adds all of its GPUs.
      const auto& pick = tasks[rng.Uniform(tasks.size())];
      const int64_t per_gpu = pick.num_gpu <= 0 ? 0 : pick.gpu_milli;
      if (demand + per_gpu > target_milli) break;
      demand += pick.GpuDemand();
      out.push_back(pick);
    }
  } else {
    // As tuneDownPods: a random task out, the others keep their order.
    while (demand > target_milli && !out.empty()) {
      const size_t i = rng.Uniform(out.size());
      demand -= out[i].GpuDemand();
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return out;
}

std::vector<sched::TaskRequest> OpenbArrivals(std::vector<sched::TaskRequest> tasks,
                                              int64_t target_milli, sched::Rng& rng) {
  Shuffle(tasks, rng);
  return InflateTasks(tasks, target_milli, rng);
}

std::vector<size_t> OpenbVisitOrder(const std::vector<OpenbNode>& nodes, OpenbNodeOrder order,
                                    sched::Rng& rng) {
  std::vector<size_t> out(nodes.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = i;
  std::stable_sort(out.begin(), out.end(),
                   [&](size_t a, size_t b) { return nodes[a].name < nodes[b].name; });
  if (order == OpenbNodeOrder::kRandomNames) Shuffle(out, rng);
  return out;
}

Result<OpenbResult> RunOpenb(const std::vector<OpenbNode>& nodes,
                             const std::vector<OpenbTask>& tasks, const OpenbOptions& options) {
  OpenbResult res;
  res.policy = options.policy;
  res.seed = options.seed;
  for (const auto& n : nodes) {
    res.gpus_total += static_cast<int64_t>(n.capacity.gpus.size());
    res.gpu_milli_total += sched::FreeGpuMilli(n.capacity);  // of the capacity: all of it
  }
  if (res.gpu_milli_total == 0) return Status::InvalidArgument("the cluster has no GPUs");

  sched::Rng rng(options.seed);
  std::vector<sched::TaskRequest> original;
  for (const auto& t : tasks) original.push_back(t.request);
  const std::vector<sched::TaskRequest> list =
      OpenbArrivals(original, res.gpu_milli_total * options.inflate_pct / 100, rng);
  std::vector<sched::NodeCapacity> caps;
  for (size_t i : OpenbVisitOrder(nodes, options.node_order, rng)) {
    caps.push_back(nodes[i].capacity);
  }
  sched::ClusterState state = sched::ClusterState::FromCapacity(std::move(caps));

  std::vector<sched::TaskType> workload = sched::TypicalTaskTypes(
      original, options.typical_threshold_pct, options.typical_step, options.typical_include_cpu);
  OpenbPlacer place;
  if (options.via_decide) {
    GP_ASSIGN_OR_RETURN(place, MakeDecidePlacer(state, std::move(workload), options, rng));
  } else {
    std::shared_ptr<sched::PlacementPolicy> policy =
        sched::MakePolicy(options.policy, std::move(workload), options.tie_break);
    if (!policy) return Status::InvalidArgument("unknown policy '" + options.policy + "'");
    place = [policy, &rng](const sched::ClusterState& s,
                           const sched::TaskRequest& t) -> Result<std::optional<sched::Choice>> {
      return policy->Place(s, t, rng);
    };
  }

  const double total = static_cast<double>(res.gpu_milli_total);
  auto pct = [&](int64_t milli) { return 100.0 * static_cast<double>(milli) / total; };
  res.curve.push_back({0, 0.0});
  int next = 1;
  bool at_100 = false;
  for (const auto& task : list) {
    ++res.tasks_arrived;
    res.arrived_gpu_milli += task.GpuDemand();
    GP_ASSIGN_OR_RETURN(std::optional<sched::Choice> choice, place(state, task));
    if (choice &&
        sched::Allocate(state.free[static_cast<size_t>(choice->node)], task, choice->gpus)) {
      res.allocated_gpu_milli += task.GpuDemand();
    } else {
      ++res.tasks_failed;
    }
    while (res.arrived_gpu_milli * 100 >= int64_t{next} * res.gpu_milli_total) {
      res.curve.push_back({next, pct(res.allocated_gpu_milli)});
      if (next == 100) {
        res.allocation_rate_at_100 = pct(res.allocated_gpu_milli);
        at_100 = true;
      }
      ++next;
    }
  }
  if (!at_100) res.allocation_rate_at_100 = pct(res.allocated_gpu_milli);
  res.allocation_rate_at_end = pct(res.allocated_gpu_milli);
  res.unallocated_gpus_at_end =
      static_cast<double>(res.gpu_milli_total - res.allocated_gpu_milli) / sched::kMilliPerGpu;
  return res;
}

Status WriteOpenbOutputs(const std::string& dir, const OpenbResult& r, double wall_seconds) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal(dir + ": cannot create: " + ec.message());
  nlohmann::json j = {
      {"policy", r.policy},
      {"seed", r.seed},
      {"gpus_total", r.gpus_total},
      {"gpu_milli_total", r.gpu_milli_total},
      {"tasks_arrived", r.tasks_arrived},
      {"tasks_failed", r.tasks_failed},
      {"arrived_gpu_milli", r.arrived_gpu_milli},
      {"allocated_gpu_milli", r.allocated_gpu_milli},
      {"allocation_rate_at_100", r.allocation_rate_at_100},
      {"allocation_rate_at_end", r.allocation_rate_at_end},
      {"unallocated_gpus_at_end", r.unallocated_gpus_at_end},
      {"wall_seconds", wall_seconds},
  };
  {
    std::ofstream out(dir + "/summary.json");
    out << j.dump(2) << "\n";
    if (!out) return Status::Internal(dir + "/summary.json: write failed");
  }
  std::ofstream csv(dir + "/curve.csv");
  csv << "arrived_pct,allocation_pct\n";
  for (const auto& p : r.curve) csv << p.arrived_pct << "," << p.allocation_pct << "\n";
  if (!csv) return Status::Internal(dir + "/curve.csv: write failed");
  return Status::Ok();
}

int RunOpenbCommand(const OpenbCommand& cmd) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [](const Status& s) {
    std::cerr << "gpupool sim openb: " << s.message() << "\n";
    return 1;
  };
  auto nodes_text = ReadFile(cmd.nodes_path);
  if (!nodes_text.ok()) return fail(nodes_text.status());
  auto tasks_text = ReadFile(cmd.tasks_path);
  if (!tasks_text.ok()) return fail(tasks_text.status());
  auto nodes = ParseOpenbNodes(cmd.nodes_path, *nodes_text);
  if (!nodes.ok()) return fail(nodes.status());
  auto tasks = ParseOpenbTasks(cmd.tasks_path, *tasks_text);
  if (!tasks.ok()) return fail(tasks.status());
  auto result = RunOpenb(*nodes, *tasks, cmd.options);
  if (!result.ok()) return fail(result.status());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (Status s = WriteOpenbOutputs(cmd.out_dir, *result, wall); !s.ok()) return fail(s);
  std::cout << "policy=" << result->policy << " seed=" << result->seed
            << " gpus=" << result->gpus_total << " alloc@100=" << result->allocation_rate_at_100
            << "% alloc@end=" << result->allocation_rate_at_end
            << "% unallocated_gpus=" << result->unallocated_gpus_at_end
            << " failed=" << result->tasks_failed << "/" << result->tasks_arrived
            << " wall=" << wall << "s\n";
  return 0;
}

}  // namespace gpupool::sim
