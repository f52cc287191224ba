// Databases of every past schema version, filled with realistic data,
// opened by the current code; and migrations that fail.
//
// A database "at version N" is built the way a real one lives: migration 1
// (the production one, through SqliteStore::Open with the first migrations
// only), then version 1's rows written with version 1's SQL; migration 2,
// then version 2's rows; ... up to N. The current SqliteStore then opens it
// (migrating it to kSchemaVersion) and every version's check reads its rows
// back through the Store interface, so rows written under v1 are checked
// after passing through every later migration.
//
// A new migration adds one entry to kVersions: the rows a database of its
// version holds (SQL against its own schema) and the check that reads them
// through the Store. Nothing else changes.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "store/sqlite_files.h"
#include "store/sqlite_store.h"
#include "store/sqlite_testing.h"

namespace gpupool {
namespace {

using sqlite_testing::RawDb;
using sqlite_testing::TempDir;

// Everything a database holds, as text: its schema (sqlite_master), every
// row of every table in rowid or key order, and user_version. Two equal
// dumps are the same database as far as any reader can tell.
std::string Dump(const std::string& path) {
  RawDb db(path);
  std::string out = "user_version=" + db.Scalar("PRAGMA user_version") + "\n";
  for (const auto& row :
       db.Rows("SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
               "ORDER BY type, name")) {
    out += row[0] + " " + row[1] + " on " + row[2] + ": " + row[3] + "\n";
  }
  for (const auto& table :
       db.Rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")) {
    for (const auto& row : db.Rows("SELECT * FROM \"" + table[0] + "\" ORDER BY 1, 2")) {
      out += table[0] + ":";
      for (const std::string& v : row) out += " " + v;
      out += "\n";
    }
  }
  return out;
}

// "" when equal; else the first line that differs in each (dumps are long).
std::string FirstDifference(const std::string& got, const std::string& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  size_t start = got.rfind('\n', i == 0 ? 0 : i - 1);
  start = start == std::string::npos ? 0 : start + 1;
  auto line = [&](const std::string& s) { return s.substr(start, s.find('\n', start) - start); };
  return "differs at line \"" + line(got) + "\" (expected \"" + line(want) + "\")";
}

// Runs `fn` in one transaction of `store`, failing the test on an error.
void Read(Store& store, const std::function<void(Tx&)>& fn) {
  Status st = store.Transact([&](Tx& tx) {
    fn(tx);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
}

template <typename T>
T Must(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return T{};
  return std::move(r).value();
}

// ---- what each version's databases hold

// Version 1: jobs in every state, attempts, a node, 3000 log lines of one
// job and a few of another, the outbox, meta values and tokens.
constexpr const char* kRowsV1 = R"sql(
INSERT INTO jobs VALUES
  (1, 'alice', 'train', 'running', '', NULL, 1, '1.1', 1000, 1100, 1050, 0,
   '{"name":"train","run":"python train.py","resources":{"gpus":2,"memory":"16GiB"},"env":{"SEED":"7"}}'),
  (2, 'bob', 'eval', 'succeeded', 'exited with code 0', 0, 1, '', 1001, 1300, 1200, 1300,
   '{"name":"eval","command":["python","-c","print(1)"],"resources":{"gpus":0,"cpus":"2"}}'),
  (3, 'alice', 'waits', 'pending', 'waiting for 4 free GPUs', NULL, 0, '', 1002, 1002, 0, 0,
   '{"name":"waits","run":"sleep 1","resources":{"gpus":4}}'),
  (4, 'carol', 'broke', 'failed', 'exited with code 3', 3, 2, '', 1003, 1400, 1010, 1400,
   '{"name":"broke","run":"exit 3","resources":{"gpus":1}}');
INSERT INTO attempts VALUES
  ('1.1', 1, 1, 'n-1', '["GPU-a","GPU-b"]', 'running', NULL, '', 1010, 1050, 0),
  ('2.1', 2, 1, 'n-1', '[]', 'succeeded', 0, '', 1011, 1200, 1300),
  ('4.1', 4, 1, 'n-1', '["GPU-a"]', 'lost', NULL, 'node n-1 was lost', 1004, 1010, 1200),
  ('4.2', 4, 2, 'n-1', '["GPU-b"]', 'failed', 3, 'exited with code 3', 1201, 1210, 1400);
INSERT INTO nodes VALUES
  ('n-1', 'alpha', 'ready',
   '[{"index":0,"uuid":"GPU-a","name":"A100","memory_mib":81920,"cc_major":8,"cc_minor":0,"simulated":true},
     {"index":1,"uuid":"GPU-b","name":"A100","memory_mib":81920,"cc_major":8,"cc_minor":0,"simulated":true}]',
   32000, 262144, '550.54', '12.4', '0.1.0', '{"rack":"3"}', 900, 1500);
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 2999)
INSERT INTO logs (job_id, attempt_id, "offset", stream, ts_ms, text)
  SELECT 1, '1.1', i * 40, CASE WHEN i % 10 = 9 THEN 'stderr' ELSE 'stdout' END, 1050 + i,
         printf('epoch %d step %04d loss %.3f', i / 100, i, 1.0 / (i + 1)) FROM n;
INSERT INTO logs (job_id, attempt_id, "offset", stream, ts_ms, text) VALUES
  (2, '2.1', 0, 'stdout', 1250, '1'),
  (2, '2.1', 2, 'stderr', 1251, 'a warning with "quotes" and ünïcode');
INSERT INTO outbox VALUES ('n-1', 7, 'stop', '{"attempt":"1.1","reason":"cancelled"}');
INSERT INTO outbox_seq VALUES ('n-1', 7);
INSERT INTO meta VALUES ('agent_seq/n-1', '{"instance":"i-1","seq":41}');
INSERT INTO tokens VALUES
  ('a1b2', 'admin', 'admin', 5, 0, 0),
  ('c3d4', 'n-1', 'agent', 6, 0, 0),
  ('e5f6', 'alice', 'member', 7, 99999, 1);
)sql";

void CheckV1(Tx& tx) {
  auto job = Must(tx.GetJob(1));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->owner, "alice");
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->spec.resources.gpus, 2);
  EXPECT_EQ(job->spec.env.at("SEED"), "7");
  EXPECT_EQ(job->spec.group, "default");
  EXPECT_EQ(job->current_attempt, "1.1");
  EXPECT_EQ(job->input_bytes, 0);
  EXPECT_EQ(job->restarts, 0);
  auto eval = Must(tx.GetJob(2));
  ASSERT_TRUE(eval.has_value());
  EXPECT_EQ(eval->exit_code, std::optional<int32_t>(0));
  EXPECT_EQ(eval->spec.command, (std::vector<std::string>{"python", "-c", "print(1)"}));
  EXPECT_EQ(eval->finished_ms, 1300);
  auto broke = Must(tx.GetJob(4));
  ASSERT_TRUE(broke.has_value());
  EXPECT_EQ(broke->exit_code, std::optional<int32_t>(3));
  EXPECT_EQ(broke->reason, "exited with code 3");

  JobQuery pending;
  pending.owner = "alice";
  pending.states = {JobState::kPending};
  EXPECT_EQ(Must(tx.CountJobs(pending)), 1);
  JobQuery first;
  first.limit = 4;
  auto listed = Must(tx.ListJobs(first));
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[3].owner, "carol");

  AttemptQuery of4;
  of4.job_id = 4;
  auto attempts = Must(tx.ListAttempts(of4));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].state, AttemptState::kLost);
  EXPECT_EQ(attempts[1].exit_code, std::optional<int32_t>(3));
  auto gpu = Must(tx.GetAttempt("1.1"));
  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(gpu->gpu_uuids, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(gpu->gpu_milli, 1000);  // attempts from before shares held whole GPUs
  EXPECT_TRUE(gpu->ranks.empty());
  auto cpu = Must(tx.GetAttempt("2.1"));
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->gpu_milli, 0);
  AttemptQuery live;
  live.node_id = "n-1";
  live.live_only = true;
  auto on_node = Must(tx.ListAttempts(live));
  EXPECT_EQ(
      std::count_if(on_node.begin(), on_node.end(), [](const Attempt& a) { return a.job_id <= 4; }),
      1);

  auto node = Must(tx.GetNodeByName("alpha"));
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->gpus.size(), 2u);
  EXPECT_EQ(node->gpus[1].uuid, "GPU-b");
  EXPECT_EQ(node->labels.at("rack"), "3");
  EXPECT_EQ(node->memory_mib, 262144);

  // Every log line, in order, through the cursor paging readers use.
  std::vector<LogLine> lines;
  int64_t cursor = 0;
  while (true) {
    auto page = Must(tx.ReadLogs(1, cursor, 1000));
    if (page.empty()) break;
    cursor = page.back().cursor;
    lines.insert(lines.end(), page.begin(), page.end());
  }
  ASSERT_EQ(lines.size(), 3000u);
  for (size_t i = 1; i < lines.size(); ++i) ASSERT_LT(lines[i - 1].cursor, lines[i].cursor);
  EXPECT_EQ(lines[0].text, "epoch 0 step 0000 loss 1.000");
  EXPECT_EQ(lines[2999].text, "epoch 29 step 2999 loss 0.000");
  EXPECT_EQ(lines[9].stream, "stderr");
  EXPECT_EQ(lines[1234].offset, 1234 * 40);
  EXPECT_EQ(lines[1234].rank, 0);
  EXPECT_EQ(Must(tx.LastLogOffset("1.1", 0)), 2999 * 40);
  auto other = Must(tx.ReadLogs(2, 0, 10));
  ASSERT_EQ(other.size(), 2u);
  EXPECT_EQ(other[1].text, "a warning with \"quotes\" and ünïcode");

  auto outbox = Must(tx.ListOutbox("n-1", 0));
  ASSERT_EQ(outbox.size(), 1u);
  EXPECT_EQ(outbox[0].seq, 7);
  EXPECT_EQ(outbox[0].type, "stop");
  EXPECT_EQ(Must(tx.GetMeta("agent_seq/n-1")),
            std::optional<std::string>(R"({"instance":"i-1","seq":41})"));

  auto admin = Must(tx.GetToken("a1b2"));
  ASSERT_TRUE(admin.has_value());
  EXPECT_EQ(admin->role, "admin");
  EXPECT_EQ(admin->scopes, "*");  // tokens from before scopes may do all their role may
  auto revoked = Must(tx.GetToken("e5f6"));
  ASSERT_TRUE(revoked.has_value());
  EXPECT_TRUE(revoked->revoked);
  EXPECT_EQ(revoked->expires_ms, 99999);
}

// Version 2: shares, preemption marks, a node's owner, group usage.
constexpr const char* kRowsV2 = R"sql(
INSERT INTO jobs VALUES
  (10, 'dave', 'share', 'running', '', NULL, 2, '10.2', 2000, 2100, 2010, 0,
   '{"name":"share","run":"jupyter lab","resources":{"gpus":0.25,"gpu_memory":"10GiB"},"priority":"interactive","group":"vision"}',
   1990, 1);
INSERT INTO attempts VALUES
  ('10.1', 10, 1, 'n-1', '["GPU-a"]', 'preempted', NULL, 'preempted for job 3', 1900, 1910, 1995,
   250, 10240, 1990, 3),
  ('10.2', 10, 2, 'n-1', '["GPU-b"]', 'running', NULL, '', 2005, 2010, 0, 250, 10240, 0, 0);
UPDATE nodes SET owner_group = 'vision' WHERE id = 'n-1';
INSERT INTO group_usage VALUES ('vision', 123456789, 2000), ('nlp', 5, 1999);
)sql";

void CheckV2(Tx& tx) {
  auto job = Must(tx.GetJob(10));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->spec.resources.gpu_milli, 250);
  EXPECT_EQ(job->spec.group, "vision");
  EXPECT_EQ(job->spec.priority, JobPriority::kInteractive);
  EXPECT_EQ(job->last_preempted_ms, std::optional<int64_t>(1990));
  EXPECT_TRUE(job->front);
  auto old = Must(tx.GetAttempt("10.1"));
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->state, AttemptState::kPreempted);
  EXPECT_EQ(old->gpu_milli, 250);
  EXPECT_EQ(old->gpu_memory_mib, 10240);
  EXPECT_EQ(old->preempt_for_job, 3);
  EXPECT_EQ(Must(tx.GetNode("n-1"))->owner_group, "vision");
  auto usage = Must(tx.ListGroupUsage());
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0], (GroupUsage{"nlp", 5, 1999}));
  EXPECT_EQ(usage[1], (GroupUsage{"vision", 123456789, 2000}));
}

// Version 3: provider policies and their event log.
constexpr const char* kRowsV3 = R"sql(
INSERT INTO nodes VALUES
  ('n-2', 'beta', 'left', '[]', 8000, 16384, '', '', '0.1.0', '{}', 2500, 2600, '',
   '{"mode":"paused","gpus":{"GPU-c":40960},"not_lent":{"GPU-d":"its owner runs process 4242 on it"},"fractional":true,"allow_users":["alice"],"deny_users":[],"allow_groups":[],"deny_groups":["nlp"],"max_runtime_ms":3600000,"next_change_ms":0}');
INSERT INTO node_events (node_id, ts_ms, kind, reason, gpus, attempts) VALUES
  ('n-2', 2550, 'reclaim', 'the owner needs it', '["GPU-c"]', '["10.1"]'),
  ('n-2', 2560, 'pause', '', '[]', '[]'),
  ('n-1', 2570, 'policy', 'weekday hours', '[]', '[]'),
  ('n-2', 2590, 'leave', 'decommissioned', '[]', '[]');
)sql";

void CheckV3(Tx& tx) {
  auto node = Must(tx.GetNodeByName("beta"));
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->state, NodeState::kLeft);
  ASSERT_TRUE(node->lending.has_value());
  EXPECT_EQ(node->lending->mode, "paused");
  EXPECT_EQ(node->lending->gpus.at("GPU-c"), 40960);
  EXPECT_EQ(node->lending->not_lent.at("GPU-d"), "its owner runs process 4242 on it");
  EXPECT_EQ(node->lending->deny_groups, std::set<std::string>{"nlp"});
  EXPECT_EQ(node->lending->max_runtime_ms, 3600000);
  EXPECT_FALSE(Must(tx.GetNode("n-1"))->lending.has_value());  // older agents lend everything
  auto events = Must(tx.ListNodeEvents("n-2", 0, 0, 100));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, "reclaim");
  EXPECT_EQ(events[0].gpus, std::vector<std::string>{"GPU-c"});
  EXPECT_EQ(events[0].attempts, std::vector<std::string>{"10.1"});
  EXPECT_EQ(events[2].reason, "decommissioned");
  EXPECT_EQ(Must(tx.ListNodeEvents("", events[0].id, 0, 100)).size(), 3u);
}

// Version 4: checkpoints (numbers survive retention's deletes), inputs.
constexpr const char* kRowsV4 = R"sql(
INSERT INTO jobs VALUES
  (20, 'erin', 'ckpt', 'running', '', NULL, 1, '20.1', 3000, 3100, 3010, 0,
   '{"name":"ckpt","run":"python train.py","resources":{"gpus":1},"group":"nlp","inputs":"1111111111111111111111111111111111111111111111111111111111111111","checkpoint":{"interval":"10m","grace":"1m"}}',
   NULL, 0);
INSERT INTO attempts VALUES
  ('20.1', 20, 1, 'n-1', '["GPU-a"]', 'running', NULL, '', 3005, 3010, 0, 1000, 0, 0, 0, 3090);
INSERT INTO checkpoints VALUES
  (20, 4, '20.1', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 3050, 5000000, 3),
  (20, 5, '20.1', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 3090, 6000000, 3),
  (2, 1, '2.1', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 1290, 5000000, 3);
INSERT INTO checkpoint_seq VALUES (20, 5), (2, 1);
)sql";

void CheckV4(Tx& tx) {
  auto job = Must(tx.GetJob(20));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->spec.inputs, std::string(64, '1'));
  ASSERT_TRUE(job->spec.checkpoint.has_value());
  EXPECT_EQ(job->spec.checkpoint->interval_ms, 600000);
  EXPECT_EQ(Must(tx.GetAttempt("20.1"))->last_checkpoint_ms, 3090);
  auto ckpts = Must(tx.ListCheckpoints(20));
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].number, 4);
  EXPECT_EQ(ckpts[1].bytes, 6000000);
  EXPECT_EQ(Must(tx.LatestCheckpoint(20))->manifest, std::string(64, 'b'));
  auto inputs = Must(tx.ListActiveJobInputs());
  EXPECT_NE(std::find(inputs.begin(), inputs.end(), std::string(64, '1')), inputs.end());
  // Storage counts the kept checkpoints of old databases (inputs recorded
  // before their size was, count 0 bytes).
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kUser, "erin"})).bytes, 11000000);
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kGroup, "nlp"})).bytes, 11000000);
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kUser, "bob"})).bytes, 5000000);
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kGroup, "default"})).bytes, 5000000);
}

// Version 4's checkpoints keep counting right after the migration: a new
// one is numbered after the old ones, and deleting them frees what they held.
void UseV4(Tx& tx) {
  Checkpoint c;
  c.job_id = 20;
  c.attempt_id = "20.1";
  c.manifest = std::string(64, 'c');
  c.bytes = 1;
  auto added = Must(tx.AddCheckpoint(c));
  EXPECT_EQ(added.number, 6);
  ASSERT_TRUE(tx.DeleteCheckpoint(20, 4).ok());
  ASSERT_TRUE(tx.DeleteCheckpoint(20, 5).ok());
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kUser, "erin"})).bytes, 1);
  auto job = Must(tx.GetJob(20));
  job->state = JobState::kSucceeded;
  ASSERT_TRUE(tx.UpdateJob(*job).ok());
  auto inputs = Must(tx.ListActiveJobInputs());
  EXPECT_EQ(std::find(inputs.begin(), inputs.end(), std::string(64, '1')), inputs.end());
}

// Version 5: identities.
constexpr const char* kRowsV5 = R"sql(
INSERT INTO tokens VALUES ('f7a8', 'alice', 'member', 8, 0, 0, 'laptop', 'jobs:read,jobs:write');
INSERT INTO users VALUES
  ('admin', 'admin', '', 0, 1),
  ('alice', 'member', '$argon2id$v=19$m=65536,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2g', 0, 2),
  ('mallory', 'member', '', 1, 3);
INSERT INTO user_groups VALUES ('vision', '["alice","dave"]', 1, 4), ('nlp', '[]', 0, 5);
INSERT INTO audit (ts_ms, actor, action, target, detail, peer, ok) VALUES
  (10, 'admin', 'user.add', 'alice', 'role member', '127.0.0.1:5000', 1),
  (11, 'mallory', 'login', 'mallory', 'wrong user name or password', '10.1.2.3:50112', 0);
INSERT INTO agent_credentials VALUES
  ('alpha', 'c3d4', 'e94b01', 'sha256:00ff', '', 900, 0, 0),
  ('beta', '9999', '', '', 'alice', 2400, 1, 2595);
)sql";

void CheckV5(Tx& tx) {
  auto laptop = Must(tx.GetToken("f7a8"));
  ASSERT_TRUE(laptop.has_value());
  EXPECT_EQ(laptop->name, "laptop");
  EXPECT_EQ(laptop->scopes, "jobs:read,jobs:write");
  EXPECT_EQ(Must(tx.ListTokens("alice")).size(), 2u);
  auto users = Must(tx.ListUsers());
  ASSERT_EQ(users.size(), 3u);
  EXPECT_TRUE(users[2].disabled);
  EXPECT_EQ(Must(tx.GetUser("alice"))->password_hash.substr(0, 10), "$argon2id$");
  auto vision = Must(tx.GetGroup("vision"));
  ASSERT_TRUE(vision.has_value());
  EXPECT_EQ(vision->members, (std::vector<std::string>{"alice", "dave"}));
  EXPECT_TRUE(vision->shared_jobs);
  auto audit = Must(tx.ListAudit(0, 0, 10));
  ASSERT_EQ(audit.size(), 2u);
  EXPECT_FALSE(audit[1].ok);
  EXPECT_EQ(audit[1].peer, "10.1.2.3:50112");
  auto beta = Must(tx.GetAgentCredential("beta"));
  ASSERT_TRUE(beta.has_value());
  EXPECT_TRUE(beta->revoked);
  EXPECT_EQ(beta->owner, "alice");
  EXPECT_EQ(Must(tx.ListAgentCredentials()).size(), 2u);
}

// Version 6: gangs (ranks, attempt_nodes, per-rank log lines), restarts.
constexpr const char* kRowsV6 = R"sql(
INSERT INTO jobs VALUES
  (30, 'frank', 'ddp', 'running', '', NULL, 2, '30.2', 4000, 4100, 4010, 0,
   '{"name":"ddp","run":"torchrun train.py","resources":{"gpus":1,"nodes":2},"max_restarts":3}',
   NULL, 0, 1);
INSERT INTO attempts VALUES
  ('30.2', 30, 2, 'n-1', '["GPU-a"]', 'running', NULL, '', 4005, 4010, 0, 1000, 0, 0, 0, 0,
   '{"ranks":[{"rank":0,"node_id":"n-1","gpu_uuids":["GPU-a"],"state":"running","reason":"","finished_ms":0},{"rank":1,"node_id":"n-2","gpu_uuids":["GPU-c"],"state":"failed","exit_code":1,"reason":"exited with code 1","finished_ms":4050}],"master_addr":"10.0.0.1","master_port":29500,"stop_ms":4050,"stop_rank":1}');
INSERT INTO attempt_nodes VALUES ('n-1', '30.2'), ('n-2', '30.2');
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
INSERT INTO logs (job_id, attempt_id, rank, "offset", stream, ts_ms, text)
  SELECT 30, '30.2', i % 2, (i / 2) * 10, 'stdout', 4010 + i, printf('rank %d line %d', i % 2, i / 2)
  FROM n;
)sql";

void CheckV6(Tx& tx) {
  auto job = Must(tx.GetJob(30));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->restarts, 1);
  EXPECT_EQ(job->spec.resources.nodes, 2);
  EXPECT_EQ(job->spec.max_restarts, 3);
  auto a = Must(tx.GetAttempt("30.2"));
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->ranks.size(), 2u);
  EXPECT_EQ(a->ranks[1].exit_code, std::optional<int32_t>(1));
  EXPECT_EQ(a->MasterEndpoint(), "10.0.0.1:29500");
  EXPECT_EQ(a->gang_stop_rank, 1);
  // Version 9: a gang whose ranks were being stopped says so in its state.
  EXPECT_EQ(a->state, AttemptState::kGangStopping);
  AttemptQuery on2;
  on2.node_id = "n-2";
  on2.live_only = true;
  auto live = Must(tx.ListAttempts(on2));
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].id, "30.2");
  auto lines = Must(tx.ReadLogs(30, 0, 2000));
  ASSERT_EQ(lines.size(), 1000u);
  EXPECT_EQ(lines[1].rank, 1);
  EXPECT_EQ(lines[1].text, "rank 1 line 0");
  EXPECT_EQ(Must(tx.LastLogOffset("30.2", 1)), 4990);
  EXPECT_EQ(Must(tx.LastLogOffset("30.2", 0)), 4990);
}

// Version 8: inputs' sizes and storage quotas.
constexpr const char* kRowsV8 = R"sql(
INSERT INTO jobs VALUES
  (40, 'gina', 'data', 'pending', '', NULL, 0, '', 5000, 5000, 0, 0,
   '{"name":"data","run":"python prep.py","resources":{"gpus":1},"group":"vision","inputs":"2222222222222222222222222222222222222222222222222222222222222222"}',
   NULL, 0, 0, 7340032);
INSERT INTO storage_quotas VALUES ('user', 'gina', 10485760, 5001), ('group', 'vision', 1073741824, 5002);
)sql";

void CheckV8(Tx& tx) {
  EXPECT_EQ(Must(tx.GetJob(40))->input_bytes, 7340032);
  EXPECT_EQ(Must(tx.StorageUsed({StorageHolderKind::kUser, "gina"})).bytes, 7340032);
  auto quota = Must(tx.GetStorageQuota({StorageHolderKind::kUser, "gina"}));
  ASSERT_TRUE(quota.has_value());
  EXPECT_EQ(quota->bytes, 10485760);
  EXPECT_EQ(Must(tx.ListStorageQuotas()).size(), 2u);
}

// A price, a charge and the balances it moved, as version 10 wrote them.
constexpr const char* kRowsV10 = R"sql(
INSERT INTO prices VALUES (1, 'gpu', 'A100', 2500000, 6000, 'root');
INSERT INTO ledger VALUES (1, 'charge:40.1/0:6000', 'charge', 'group:vision', 'pool', 2500000,
  3606000, '40.1', 0, 40, 'gina', 'vision', 'n-1', 'physics', 'A100', 6000, 1000, 0, 0, '', '');
INSERT INTO balances VALUES ('group:vision', -2500000, 1), ('pool', 2500000, 1);
)sql";

void CheckV10(Tx& tx) {
  auto prices = Must(tx.ListPrices());
  ASSERT_EQ(prices.size(), 1u);
  EXPECT_EQ(prices[0].gpu_class, "A100");
  EXPECT_EQ(prices[0].per_unit, 2500000);
  EXPECT_EQ(Must(tx.GetBalance("group:vision")).balance, -2500000);
  EXPECT_EQ(Must(tx.PostedTo("40.1", 0)), 3606000);
  auto ledger = Must(tx.ListLedger(LedgerQuery{}));
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].GpuMilliMs(), 1000LL * 3600000);
}

// Version 11 fills the usage rollups from the ledger: a report over whole
// months (from them) finds version 10's charge.
void CheckV11(Tx& tx) {
  UsageQuery q;
  q.by = UsageBy::kUser;
  q.since_ms = 0;
  EXPECT_EQ(Must(tx.SumUsage(q)),
            (std::vector<UsageRow>{{"gina", 1000LL * 3600000, 0, 2500000, 1}}));
  q.by = UsageBy::kNode;
  EXPECT_EQ(Must(tx.SumUsage(q)).at(0).key, "n-1");
}

// Version 12 adds submission keys: a key of version 12 leads to its job,
// and the jobs of older versions take keys too.
constexpr const char* kRowsV12 = R"sql(
INSERT INTO submit_keys VALUES ('gina', 'retry-1', 40);
)sql";

void CheckV12(Tx& tx) {
  EXPECT_EQ(Must(tx.FindSubmitKey("gina", "retry-1")), std::optional<int64_t>(40));
  EXPECT_EQ(Must(tx.FindSubmitKey("gina", "other")), std::nullopt);
}

void UseV12(Tx& tx) { EXPECT_TRUE(tx.PutSubmitKey("gina", "other", 40).ok()); }

struct VersionRows {
  int version;
  const char* rows;            // SQL against that version's schema; nullptr = none
  void (*check)(Tx&);          // reads them through the Store; nullptr = none
  void (*use)(Tx&) = nullptr;  // then changes them (after every check)
};

const VersionRows kVersions[] = {
    {1, kRowsV1, CheckV1},
    {2, kRowsV2, CheckV2},
    {3, kRowsV3, CheckV3},
    {4, kRowsV4, CheckV4, UseV4},
    {5, kRowsV5, CheckV5},
    {6, kRowsV6, CheckV6},
    {7, nullptr, nullptr},  // log chunks: the v6 lines pass through it (CheckV6)
    {8, kRowsV8, CheckV8},
    {9, nullptr, nullptr},  // attempt states: the rows of
                            // kRowsBeforeV9 below, and CheckV6
    {10, kRowsV10, CheckV10},
    {11, nullptr, CheckV11},
    {12, kRowsV12, CheckV12, UseV12},
};
static_assert(std::size(kVersions) == SqliteStore::kSchemaVersion,
              "a new migration adds its rows and check to kVersions");

// Builds a database at `version` as it would have lived: each migration,
// then that version's rows.
void BuildAt(const std::string& path, int version) {
  auto all = SqliteStore::Migrations();
  for (int v = 1; v <= version; ++v) {
    SqliteOptions o;
    o.migrations = all.first(static_cast<size_t>(v));
    o.backup_before_migrating = false;
    auto store = SqliteStore::Open(path, o);
    ASSERT_TRUE(store.ok()) << "building version " << v << ": " << store.status().ToString();
    store->reset();
    ASSERT_EQ(RawDb(path).Scalar("PRAGMA user_version"), std::to_string(v));
    if (kVersions[v - 1].rows != nullptr) RawDb(path).Exec(kVersions[v - 1].rows);
  }
}

class EveryPastVersion : public ::testing::TestWithParam<int> {};

TEST_P(EveryPastVersion, OpensMigratesAndReadsEverythingBack) {
  const int version = GetParam();
  TempDir dir;
  BuildAt(dir.db(), version);
  const std::string before = Dump(dir.db());

  auto store = SqliteStore::Open(dir.db());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"),
            std::to_string(SqliteStore::kSchemaVersion));
  for (const VersionRows& v : kVersions) {
    if (v.version > version || v.check == nullptr) continue;
    SCOPED_TRACE("rows of version " + std::to_string(v.version));
    Read(**store, v.check);
  }
  for (const VersionRows& v : kVersions) {
    if (v.version > version || v.use == nullptr) continue;
    SCOPED_TRACE("using rows of version " + std::to_string(v.version));
    Read(**store, v.use);
  }
  store->reset();

  // The database as it was before the migration is kept aside, intact.
  const std::string aside = dir.db() + ".schema-v" + std::to_string(version) + ".bak";
  if (version < SqliteStore::kSchemaVersion) {
    ASSERT_TRUE(std::filesystem::exists(aside)) << aside;
    EXPECT_EQ(FirstDifference(Dump(aside), before), "");
  } else {
    EXPECT_FALSE(std::filesystem::exists(aside));
  }
  // Opening again migrates nothing and reads the same.
  auto again = SqliteStore::Open(dir.db());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Read(**again, [](Tx& tx) { EXPECT_TRUE(Must(tx.GetJob(1)).has_value()); });
}

INSTANTIATE_TEST_SUITE_P(Schema, EveryPastVersion,
                         ::testing::Range(1, SqliteStore::kSchemaVersion + 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "V" + std::to_string(info.param);
                         });

// Version 9: attempts being stopped, as version 8 marked them (timestamps
// and the -1 sentinel), and what they become.
constexpr const char* kRowsBeforeV9 = R"sql(
INSERT INTO jobs VALUES
  (50, 'hana', 'victim', 'running', 'being preempted for job 51', NULL, 1, '50.1', 6000, 6100,
   6010, 0, '{"name":"victim","run":"train","resources":{"gpus":1},"checkpoint":{}}', 6100, 0, 0, 0),
  (51, 'hana', 'idle', 'running', 'being stopped: idle', NULL, 1, '51.1', 6000, 6100, 6010, 0,
   '{"name":"idle","run":"sleep","resources":{"gpus":1},"checkpoint":{}}', 6100, 0, 0, 0),
  (52, 'hana', 'late', 'scheduled', 'being preempted for job 51', NULL, 1, '52.1', 6000, 6100,
   0, 0, '{"name":"late","run":"train","resources":{"gpus":1},"checkpoint":{}}', 6100, 0, 0, 0),
  (53, 'hana', 'ddp', 'running', '', NULL, 1, '53.1', 6000, 6100, 6010, 0,
   '{"name":"ddp","run":"torchrun t.py","resources":{"gpus":1,"nodes":2},"checkpoint":{}}',
   6100, 0, 0, 0),
  (54, 'hana', 'ended', 'cancelled', 'idle', NULL, 1, '', 6000, 6100, 6010, 6200,
   '{"name":"ended","run":"sleep","resources":{"gpus":1},"checkpoint":{}}', NULL, 0, 0, 0),
  (55, 'hana', 'plain', 'running', '', NULL, 1, '55.1', 6000, 6100, 6010, 0,
   '{"name":"plain","run":"train","resources":{"gpus":1}}', NULL, 0, 0, 0);
INSERT INTO attempts VALUES
  ('50.1', 50, 1, 'n-1', '["GPU-a"]', 'running', NULL, 'preempted for job 51', 6005, 6010, 0,
   1000, 0, 6100, 51, 0, ''),
  ('51.1', 51, 1, 'n-1', '["GPU-b"]', 'running', NULL, 'idle', 6005, 6010, 0, 1000, 0, 6100, -1,
   0, ''),
  ('52.1', 52, 1, 'n-1', '["GPU-c"]', 'scheduled', NULL, 'preempted for job 51', 6005, 0, 0,
   1000, 0, 6100, 51, 0, ''),
  ('53.1', 53, 1, 'n-1', '["GPU-d"]', 'running', NULL, 'rank 1 lost', 6005, 6010, 0, 1000, 0,
   6150, 51, 0,
   '{"ranks":[{"rank":0,"node_id":"n-1","gpu_uuids":["GPU-d"],"state":"running","reason":"","finished_ms":0},{"rank":1,"node_id":"n-2","gpu_uuids":["GPU-e"],"state":"lost","reason":"gone","finished_ms":6100}],"master_addr":"10.0.0.1","master_port":29500,"stop_ms":6100,"stop_rank":1}'),
  ('54.1', 54, 1, 'n-1', '["GPU-f"]', 'cancelled', NULL, 'idle', 6005, 6010, 6200, 1000, 0,
   6100, -1, 0, ''),
  ('55.1', 55, 1, 'n-1', '["GPU-g"]', 'running', NULL, '', 6005, 6010, 0, 1000, 0, 0, 0, 0,
   '{"ranks":[],"master_addr":"","master_port":0,"stop_ms":0,"stop_rank":-1}');
)sql";

TEST(Version9, AttemptsBeingStoppedGetTheirStatesAndStayLive) {
  TempDir dir;
  BuildAt(dir.db(), 8);
  RawDb(dir.db()).Exec(kRowsBeforeV9);
  auto store = SqliteStore::Open(dir.db());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Read(**store, [](Tx& tx) {
    auto state = [&](const std::string& id) {
      auto a = Must(tx.GetAttempt(id));
      return a ? AttemptStateName(a->state) : "missing";
    };
    EXPECT_EQ(state("50.1"), "preempting");
    EXPECT_EQ(state("51.1"), "stopping");
    EXPECT_EQ(state("52.1"), "preempting");  // ordered to stop before it started
    EXPECT_EQ(state("53.1"), "preempting");  // a preemption took precedence over the gang stop
    EXPECT_EQ(state("54.1"), "cancelled");   // ended attempts keep their state
    EXPECT_EQ(state("55.1"), "running");
    // The timestamps and what the stop was for stay, as data.
    auto victim = Must(tx.GetAttempt("50.1"));
    EXPECT_EQ(victim->preempt_ms, 6100);
    EXPECT_EQ(victim->preempt_for_job, 51);
    auto gang = Must(tx.GetAttempt("53.1"));
    EXPECT_EQ(gang->gang_stop_ms, 6100);
    EXPECT_EQ(gang->gang_stop_rank, 1);
    // The sentinel is gone: preempt_for_job names a job or is 0.
    EXPECT_EQ(Must(tx.GetAttempt("51.1"))->preempt_for_job, 0);
    EXPECT_EQ(Must(tx.GetAttempt("54.1"))->preempt_for_job, 0);
    EXPECT_EQ(Must(tx.GetAttempt("51.1"))->preempt_ms, 6100);
    // Live queries list the stopping attempts: their GPUs are still held.
    AttemptQuery live;
    live.live_only = true;
    std::vector<std::string> ids;
    for (const Attempt& a : Must(tx.ListAttempts(live))) {
      if (a.job_id >= 50) ids.push_back(a.id);
    }
    EXPECT_EQ(ids, (std::vector<std::string>{"50.1", "51.1", "52.1", "53.1", "55.1"}));
  });
}

// ---- migrations that fail

// The production migrations and then one whose SQL fails half way, after
// statements that did change the database.
std::vector<SchemaMigration> WithFailingStep() {
  auto all = SqliteStore::Migrations();
  std::vector<SchemaMigration> out(all.begin(), all.end());
  out.push_back({SqliteStore::kSchemaVersion + 1,
                 "CREATE TABLE half_done (x INTEGER);"
                 "INSERT INTO half_done VALUES (1);"
                 "UPDATE jobs SET owner = 'changed';"
                 "ALTER TABLE jobs ADD COLUMN extra INTEGER;"
                 "INSERT INTO no_such_table VALUES (1);"});
  return out;
}

TEST(FailedMigration, LeavesTheDatabaseExactlyAsItWas) {
  TempDir dir;
  BuildAt(dir.db(), 6);
  const std::string before = Dump(dir.db());
  ASSERT_NE(before.find("jobs: 1 alice"), std::string::npos) << before.substr(0, 2000);

  auto failing = WithFailingStep();
  SqliteOptions o;
  o.migrations = failing;
  auto store = SqliteStore::Open(dir.db(), o);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("no_such_table"), std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find("left at version 6, unchanged"), std::string::npos)
      << store.status().ToString();
  // Versions 7 and 8 succeeded on their own, yet nothing of them stayed.
  EXPECT_EQ(FirstDifference(Dump(dir.db()), before), "");
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"), "6");

  // The current binary still migrates it normally afterwards.
  auto fine = SqliteStore::Open(dir.db());
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  Read(**fine, CheckV1);
}

TEST(FailedMigration, OfTheCurrentVersionLeavesItUntouchedToo) {
  TempDir dir;
  BuildAt(dir.db(), SqliteStore::kSchemaVersion);
  const std::string before = Dump(dir.db());
  auto failing = WithFailingStep();
  SqliteOptions o;
  o.migrations = failing;
  auto store = SqliteStore::Open(dir.db(), o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(FirstDifference(Dump(dir.db()), before), "");
  // It was copied aside before the attempt, intact as well.
  EXPECT_EQ(FirstDifference(
                Dump(dir.db() + ".schema-v" + std::to_string(SqliteStore::kSchemaVersion) + ".bak"),
                before),
            "");
}

TEST(FailedMigration, NoCopyAsideNoMigration) {
  TempDir dir;
  BuildAt(dir.db(), 5);
  const std::string before = Dump(dir.db());
  // The copy's place is taken by a directory: the copy fails, so nothing
  // may be migrated.
  std::filesystem::create_directories(dir.db() + ".schema-v5.bak.tmp/x");
  auto store = SqliteStore::Open(dir.db());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("nothing was migrated"), std::string::npos)
      << store.status().ToString();
  EXPECT_EQ(FirstDifference(Dump(dir.db()), before), "");
}

// ---- damaged databases

// Overwrites page `page` (1-based) of the file with garbage.
void Smash(const std::string& path, int page, int page_size = 4096) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::string junk(static_cast<size_t>(page_size), '\xA5');
  ASSERT_EQ(std::fseek(f, static_cast<long>(page - 1) * page_size, SEEK_SET), 0);
  ASSERT_EQ(std::fwrite(junk.data(), 1, junk.size(), f), junk.size());
  std::fclose(f);
}

TEST(DamagedDatabase, QuickCheckRefusesItAsDataLoss) {
  TempDir dir;
  BuildAt(dir.db(), SqliteStore::kSchemaVersion);
  RawDb(dir.db()).Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  // The root of the jobs table's b-tree.
  int page =
      std::stoi(RawDb(dir.db()).Scalar("SELECT rootpage FROM sqlite_master WHERE name = "
                                       "'jobs'"));
  Smash(dir.db(), page);
  SqliteOptions o;
  o.check_integrity = true;
  auto store = SqliteStore::Open(dir.db(), o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find("quick_check"), std::string::npos);
  auto checked = CheckSqliteFile(dir.db());
  EXPECT_EQ(checked.status().code(), StatusCode::kDataLoss);
}

TEST(DamagedDatabase, AHeaderThatIsNotADatabaseIsDataLoss) {
  TempDir dir;
  BuildAt(dir.db(), 2);
  RawDb(dir.db()).Exec("PRAGMA wal_checkpoint(TRUNCATE)");
  Smash(dir.db(), 1);
  SqliteOptions o;
  o.check_integrity = true;
  auto store = SqliteStore::Open(dir.db(), o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
}

// ---- backups

TEST(Backup, IsAConsistentCopyWhileAWriterGoesOn) {
  TempDir dir;
  BuildAt(dir.db(), SqliteStore::kSchemaVersion);
  auto store = SqliteStore::Open(dir.db());
  ASSERT_TRUE(store.ok());
  // A transaction in progress on the live store is not in the copy.
  Status st = (*store)->Transact([&](Tx& tx) -> Status {
    Job j;
    j.owner = "uncommitted";
    j.spec.name = "x";
    j.spec.run = "true";
    GP_RETURN_IF_ERROR(tx.InsertJob(j).status());
    auto copy = BackupSqliteFile(dir.db(), dir.path() + "/backup.db");
    EXPECT_TRUE(copy.ok()) << copy.status().ToString();
    if (copy.ok()) {
      EXPECT_EQ(copy->schema_version, SqliteStore::kSchemaVersion);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(RawDb(dir.path() + "/backup.db")
                .Scalar("SELECT count(*) FROM jobs WHERE owner = "
                        "'uncommitted'"),
            "0");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/backup.db-wal"));
  // The copy opens as a store and holds everything committed.
  auto copy = SqliteStore::Open(dir.path() + "/backup.db");
  ASSERT_TRUE(copy.ok());
  for (const VersionRows& v : kVersions) {
    if (v.check != nullptr) Read(**copy, v.check);
  }
}

TEST(Restore, RefusesWhileInUseThenPutsTheBackupInPlace) {
  TempDir dir;
  BuildAt(dir.db(), SqliteStore::kSchemaVersion);
  ASSERT_TRUE(BackupSqliteFile(dir.db(), dir.path() + "/backup.db").ok());
  {
    auto live = SqliteStore::Open(dir.db());
    ASSERT_TRUE(live.ok());
    // In use by this process: not seen (POSIX locks are per process), so
    // look from a child process as a second server would.
    pid_t pid = fork();
    if (pid == 0) {
      auto busy = SqliteFileInUse(dir.db());
      _exit(busy.ok() && *busy ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a live database looks unused";
    (void)(*live)->Transact([](Tx& tx) { return tx.PutMeta("after-backup", "1"); });
  }
  EXPECT_FALSE(*SqliteFileInUse(dir.db()));
  auto restored =
      RestoreSqliteFile(dir.path() + "/backup.db", dir.db(), SqliteStore::kSchemaVersion, 777);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->set_aside, dir.db() + ".before-restore-777");
  EXPECT_TRUE(std::filesystem::exists(restored->set_aside));
  auto store = SqliteStore::Open(dir.db());
  ASSERT_TRUE(store.ok());
  Read(**store, [](Tx& tx) {
    EXPECT_FALSE(Must(tx.GetMeta("after-backup")).has_value());
    CheckV1(tx);
  });
}

TEST(Restore, RefusesADamagedOrNewerBackup) {
  TempDir dir;
  BuildAt(dir.db(), 3);
  ASSERT_TRUE(BackupSqliteFile(dir.db(), dir.path() + "/newer.db").ok());
  RawDb(dir.path() + "/newer.db").Exec("PRAGMA user_version = 99");
  auto newer = RestoreSqliteFile(dir.path() + "/newer.db", dir.db(), 8, 1);
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer"), std::string::npos);
  ASSERT_TRUE(BackupSqliteFile(dir.db(), dir.path() + "/bad.db").ok());
  Smash(dir.path() + "/bad.db", 1);
  auto bad = RestoreSqliteFile(dir.path() + "/bad.db", dir.db(), 8, 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  // Nothing moved.
  EXPECT_FALSE(std::filesystem::exists(dir.db() + ".before-restore-1"));
  EXPECT_EQ(RawDb(dir.db()).Scalar("PRAGMA user_version"), "3");
}

}  // namespace
}  // namespace gpupool
