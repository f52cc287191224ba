// Store: the server's durable state behind one interface.
//
// Every change happens inside Store::Transact, which runs the callback with
// a Tx and commits only if the callback returns OK; any error rolls the whole
// transaction back, so a rejected request never leaves partial state. Once
// Transact returns OK the change survives a crash of the process (SIGKILL).
//
// Threading: a Store may be used from one thread at a time (the server's
// event loop). Tx objects are only valid inside their Transact callback.
//
// The transaction's methods are grouped into facets (JobsTx, NodesTx,
// IdentityTx, LogsTx, StorageTx, AccountingTx, MetaTx below); Tx has them
// all.
//
// Backends: SqliteStore (store/sqlite_store.h) is the embedded default;
// MemoryStore (store/memory_store.h) keeps everything in memory (the
// simulator's, and tests'). Every backend must pass the shared conformance
// suite in store/store_conformance.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accounting/records.h"
#include "common/status.h"
#include "model/job.h"
#include "model/node.h"

namespace gpupool {

struct JobQuery {
  std::optional<std::string> owner;    // only this owner's jobs...
  std::vector<std::string> or_groups;  // ... and those of these groups (spec.group)
  std::vector<JobState> states;        // any of these; empty = all
  int64_t after_id = 0;                // id > after_id (paging)
  int64_t before_id = 0;               // id < before_id when above 0 (paging back)
  int32_t limit = 1000;                // at most this many, by ascending id
  bool newest_first = false;           // order by descending id instead
};

// Who stored bytes are charged to, and whose quota bounds them: a user (a
// job's owner) or a group (a job's spec.group).
enum class StorageHolderKind { kUser, kGroup };
std::string_view StorageHolderKindName(StorageHolderKind k);  // "user", "group"
// InvalidArgument for anything but "user" and "group".
Result<StorageHolderKind> ParseStorageHolderKind(std::string_view name);

struct StorageHolder {
  StorageHolderKind kind = StorageHolderKind::kUser;
  std::string name;
  friend bool operator==(const StorageHolder&, const StorageHolder&) = default;
  friend auto operator<=>(const StorageHolder&, const StorageHolder&) = default;
};

// What a user or group stores in the blob store, as the store counts it
// (see Tx::StorageUsed): logical bytes of the distinct manifests it names.
struct StorageUsage {
  StorageHolder holder;
  int64_t bytes = 0;
  int64_t manifests = 0;  // distinct manifests counted
  friend bool operator==(const StorageUsage&, const StorageUsage&) = default;
};

// An operator's storage quota for one user or group (overrides the
// server's default for its kind).
struct StorageQuota {
  StorageHolder holder;
  int64_t bytes = 0;
  int64_t set_ms = 0;
  friend bool operator==(const StorageQuota&, const StorageQuota&) = default;
};

struct AttemptQuery {
  std::optional<int64_t> job_id;
  std::optional<std::string> node_id;  // placed there (any rank of a gang)
  bool live_only = false;              // scheduled or running only
};

// One line of job output. `offset` is the byte offset of the line in the
// log of the attempt's rank as the agent recorded it; an agent ships a
// rank's lines in offset order, so a line at or below the highest offset
// already taken for its rank is a resend and is stored once.
struct LogLine {
  std::string attempt_id;
  int64_t offset = 0;
  std::string stream;  // "stdout", "stderr" or "event" (the task's own: "pulling image ...")
  int64_t ts_ms = 0;
  std::string text;  // without the trailing newline
  // Assigned by the store: increases with every stored line; a reader's cursor.
  int64_t cursor = 0;
  int32_t rank = 0;  // a gang's rank; 0 for a single-node job
  friend bool operator==(const LogLine&, const LogLine&) = default;
};

// One attempt rank's log as the store keeps it.
struct LogStream {
  int64_t job_id = 0;
  std::string attempt_id;
  int32_t rank = 0;
  int64_t last_offset = -1;      // the highest offset taken (stored, or skipped by SkipLogs)
  int64_t lines = 0;             // lines stored
  int64_t bytes = 0;             // their LogLineCost (model/job_output.h), summed
  int64_t stored_bytes = 0;      // what they take in the store (packed, compressed)
  int64_t limit_reached_ms = 0;  // when its output limit was reached; 0 = not reached
  std::string limit_event;       // the marker stored then ("output limit of 1 GiB reached: ...")
  friend bool operator==(const LogStream&, const LogStream&) = default;
};

// Lines of an attempt rank taken without being stored (an output limit
// dropped them): SkipLogs moves the rank's last_offset up to `upto_offset`
// and, when `limit_event` is not empty and the limit was not reached
// before, records it as reached at `ts_ms`.
struct LogSkip {
  int64_t job_id = 0;
  std::string attempt_id;
  int32_t rank = 0;
  int64_t upto_offset = -1;
  std::string limit_event;
  int64_t ts_ms = 0;
};
// That rule, for every backend: the rank's stream after `skip`, from its
// stored record (nullopt: it has none yet).
LogStream SkippedStream(std::optional<LogStream> stored, const LogSkip& skip);

// Every job's logs the store holds (those not removed).
struct LogTotals {
  int64_t jobs = 0;
  int64_t lines = 0;
  int64_t bytes = 0;
  int64_t stored_bytes = 0;
  friend bool operator==(const LogTotals&, const LogTotals&) = default;
};

// An ended job whose logs the store holds (ListEndedJobLogs).
struct JobLogSize {
  int64_t job_id = 0;
  int64_t finished_ms = 0;
  int64_t lines = 0;
  int64_t bytes = 0;
  int64_t stored_bytes = 0;
  friend bool operator==(const JobLogSize&, const JobLogSize&) = default;
};

// A job whose logs were removed (log retention): when, why, and what they
// were.
struct LogRemoval {
  int64_t job_id = 0;
  int64_t removed_ms = 0;
  std::string reason;
  int64_t lines = 0;
  int64_t bytes = 0;
  int64_t stored_bytes = 0;
  friend bool operator==(const LogRemoval&, const LogRemoval&) = default;
};

// A message queued for a node's agent (transactional outbox). `seq` is
// assigned by the store per node, starting at 1, without gaps.
struct OutboxMessage {
  std::string node_id;
  int64_t seq = 0;
  std::string type;
  std::string body;  // JSON text
  friend bool operator==(const OutboxMessage&, const OutboxMessage&) = default;
};

// A group's (lab's) decayed GPU usage for fair share, in GPU-milli x ms as
// of `as_of_ms` (see sched/fairshare.h DecayedUsage). The store keeps the
// numbers; the caller decays and charges them.
struct GroupUsage {
  std::string group;
  int64_t milli_ms = 0;
  int64_t as_of_ms = 0;
  friend bool operator==(const GroupUsage&, const GroupUsage&) = default;
};

struct TokenRecord {
  std::string hash;     // SHA-256 hex of the secret; secrets are never stored
  std::string subject;  // the user, or the node an agent token belongs to
  std::string role;     // "admin", "provider", "member", "agent", "agent-join"
  int64_t created_ms = 0;
  int64_t expires_ms = 0;  // 0 = never
  bool revoked = false;
  std::string name;          // what it is for ("laptop", "ci"), shown in lists
  std::string scopes = "*";  // comma-separated scopes (server/authz.h); "*" = all of the role's
  friend bool operator==(const TokenRecord&, const TokenRecord&) = default;
};

// A person (or service) who may log in. Roles: "admin", "provider", "member".
struct UserRecord {
  std::string name;
  std::string role;
  std::string password_hash;  // argon2id in libsodium's encoded form; "" = no password login
  bool disabled = false;
  int64_t created_ms = 0;
  friend bool operator==(const UserRecord&, const UserRecord&) = default;
};

// A lab: the users it contains and whether they see each other's jobs.
// (The same name is the job spec's `group` for fair share.)
struct GroupRecord {
  std::string name;
  std::vector<std::string> members;  // user names, sorted
  bool shared_jobs = false;          // members see and cancel each other's jobs
  int64_t created_ms = 0;
  friend bool operator==(const GroupRecord&, const GroupRecord&) = default;
};

// One security-relevant action (logins, token and user changes, agent
// enrollment and revocation, admin actions, reclaims). Append-only.
struct AuditEntry {
  int64_t id = 0;  // assigned by the store, increasing
  int64_t ts_ms = 0;
  std::string actor;   // who did it: a user, "node:<name>", or "server"
  std::string action;  // "login", "token.create", "agent.enroll", ...
  std::string target;  // what it was done to
  std::string detail;  // free text; never holds a secret
  std::string peer;    // the client address, when there was a request
  bool ok = true;      // false for refused attempts (failed logins)
  friend bool operator==(const AuditEntry&, const AuditEntry&) = default;
};

// The credential an agent received on enrollment: a node token (stored
// hashed in `tokens`) and, over TLS, a client certificate from the pool CA.
// One per node name; enrolling again replaces it.
struct AgentCredential {
  std::string node_name;
  std::string token_hash;
  std::string cert_serial;       // lower-case hex; "" without a certificate
  std::string cert_fingerprint;  // "sha256:<hex>"
  std::string owner;             // the provider who enrolled it; "" = the pool's join token
  int64_t enrolled_ms = 0;
  bool revoked = false;
  int64_t revoked_ms = 0;
  friend bool operator==(const AgentCredential&, const AgentCredential&) = default;
};

// A checkpoint of a job as the server keeps it: the blob store manifest
// (blob/manifest.h) an attempt uploaded, numbered per job from 1 in the
// order they arrived. Numbers are never reused, even after retention
// deleted older checkpoints.
struct Checkpoint {
  int64_t job_id = 0;
  int64_t number = 0;      // assigned by the store
  std::string attempt_id;  // the attempt that uploaded it
  std::string manifest;    // manifest id (64 lowercase hex digits)
  int64_t created_ms = 0;
  int64_t bytes = 0;  // the files' total size
  int64_t files = 0;  // file entries in the manifest
  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// ---------------------------------------------------------------------------
// The transaction's facets. Tx is one object with every facet, so a caller
// writes tx.InsertJob(...) whatever facet the method is in; the facets
// exist so that a backend is written (and reviewed) one part at a time, and
// a helper can say which part of the store it touches by taking only that
// facet (a `JobsTx&` rather than the whole `Tx&`). Every facet's methods
// run inside the one transaction of Store::Transact; none is valid after
// its callback returned.

// Jobs and what hangs off them: attempts, checkpoints, and the groups'
// fair-share usage the scheduler charges for them.
class JobsTx {
 public:
  virtual ~JobsTx() = default;

  // Jobs. InsertJob assigns job.id (ascending, never reused) and returns it.
  virtual Result<int64_t> InsertJob(const Job& job) = 0;
  virtual Status UpdateJob(const Job& job) = 0;  // NotFound if absent
  virtual Result<std::optional<Job>> GetJob(int64_t id) = 0;
  virtual Result<std::vector<Job>> ListJobs(const JobQuery& q) = 0;
  // How many jobs ListJobs would return without after_id and limit.
  virtual Result<int64_t> CountJobs(const JobQuery& q) = 0;

  // Submission keys (POST /v1/jobs's Idempotency-Key): the job a user first
  // submitted with a key, kept for as long as the pool. PutSubmitKey is
  // AlreadyExists when the user has used the key, NotFound when the job
  // does not exist.
  virtual Result<std::optional<int64_t>> FindSubmitKey(const std::string& owner,
                                                       const std::string& key) = 0;
  virtual Status PutSubmitKey(const std::string& owner, const std::string& key, int64_t job_id) = 0;

  // Attempts: insert or replace by id; NotFound when the job does not exist.
  virtual Status PutAttempt(const Attempt& a) = 0;
  virtual Result<std::optional<Attempt>> GetAttempt(const std::string& id) = 0;
  virtual Result<std::vector<Attempt>> ListAttempts(
      const AttemptQuery& q) = 0;  // by job id, number

  // Checkpoints. AddCheckpoint ignores c.number, assigns the job's next
  // number (1, 2, ...; never reused) and returns the stored checkpoint;
  // NotFound when the job does not exist.
  virtual Result<Checkpoint> AddCheckpoint(const Checkpoint& c) = 0;
  // The job's checkpoints by ascending number (oldest first).
  virtual Result<std::vector<Checkpoint>> ListCheckpoints(int64_t job_id) = 0;
  virtual Result<std::optional<Checkpoint>> GetCheckpoint(int64_t job_id, int64_t number) = 0;
  // The one with the highest number, if any.
  virtual Result<std::optional<Checkpoint>> LatestCheckpoint(int64_t job_id) = 0;
  // Absent checkpoints are not an error.
  virtual Status DeleteCheckpoint(int64_t job_id, int64_t number) = 0;

  // Fair-share usage per group: insert or replace by group name.
  virtual Status PutGroupUsage(const GroupUsage& u) = 0;
  virtual Result<std::optional<GroupUsage>> GetGroupUsage(const std::string& group) = 0;
  virtual Result<std::vector<GroupUsage>> ListGroupUsage() = 0;  // by group name
};

// Nodes and what the server exchanges with their agents: node events, the
// agents' enrollment credentials, and the outbox of messages to them.
class NodesTx {
 public:
  virtual ~NodesTx() = default;

  // Nodes: insert or replace by id; names are unique (AlreadyExists otherwise).
  virtual Status PutNode(const Node& n) = 0;
  virtual Result<std::optional<Node>> GetNode(const std::string& id) = 0;
  virtual Result<std::optional<Node>> GetNodeByName(const std::string& name) = 0;
  virtual Result<std::vector<Node>> ListNodes() = 0;  // by name

  // Node events (a provider's reclaims, pauses, ...). AppendNodeEvent
  // ignores event.id, assigns the next id (ascending, never reused) and
  // returns it. ListNodeEvents returns the events of `node_id` ("" = every
  // node) with id > after_id, at most `limit`: by ascending id when
  // before_id is 0, else those with id < before_id, newest first (by
  // descending id: the latest page of a log, and the pages before it).
  virtual Result<int64_t> AppendNodeEvent(const NodeEvent& event) = 0;
  virtual Result<std::vector<NodeEvent>> ListNodeEvents(const std::string& node_id,
                                                        int64_t after_id, int64_t before_id,
                                                        int32_t limit) = 0;

  // Agent credentials, by node name.
  virtual Status PutAgentCredential(const AgentCredential& c) = 0;
  virtual Result<std::optional<AgentCredential>> GetAgentCredential(const std::string& node) = 0;
  virtual Result<std::vector<AgentCredential>> ListAgentCredentials() = 0;

  // Outbox. PushOutbox assigns and returns the next seq for the node.
  virtual Result<int64_t> PushOutbox(const std::string& node_id, const std::string& type,
                                     const std::string& body) = 0;
  // Messages with seq > after_seq, ascending.
  virtual Result<std::vector<OutboxMessage>> ListOutbox(const std::string& node_id,
                                                        int64_t after_seq) = 0;
  // Drops messages with seq <= upto_seq. The seq counter is not reset.
  virtual Status AckOutbox(const std::string& node_id, int64_t upto_seq) = 0;
};

// Who may do what: users, groups (labs), API tokens, and the audit log.
class IdentityTx {
 public:
  virtual ~IdentityTx() = default;

  // Tokens, looked up by hash.
  virtual Status PutToken(const TokenRecord& t) = 0;
  virtual Result<std::optional<TokenRecord>> GetToken(const std::string& hash) = 0;
  // Every token of `subject` ("" = all), oldest first.
  virtual Result<std::vector<TokenRecord>> ListTokens(const std::string& subject) = 0;

  // Users and groups, by name.
  virtual Status PutUser(const UserRecord& u) = 0;
  virtual Result<std::optional<UserRecord>> GetUser(const std::string& name) = 0;
  virtual Result<std::vector<UserRecord>> ListUsers() = 0;
  virtual Status PutGroup(const GroupRecord& g) = 0;
  virtual Result<std::optional<GroupRecord>> GetGroup(const std::string& name) = 0;
  virtual Result<std::vector<GroupRecord>> ListGroups() = 0;

  // The audit log: append (returns the id) and read: ids above after_id in
  // id order, or with before_id > 0 those below it, newest first (as
  // ListNodeEvents).
  virtual Result<int64_t> AppendAudit(const AuditEntry& e) = 0;
  virtual Result<std::vector<AuditEntry>> ListAudit(int64_t after_id, int64_t before_id,
                                                    int32_t limit) = 0;
};

// Jobs' output, kept per attempt rank (LogStream), and its retention.
class LogsTx {
 public:
  virtual ~LogsTx() = default;

  // AppendLogs stores `lines` (of any attempts and ranks of the job) in
  // their order, each with the next cursor; a line whose offset is at or
  // below its rank's last_offset is skipped (a resend), and so is every
  // line of a job whose logs were removed. NotFound when the job does not
  // exist.
  virtual Status AppendLogs(int64_t job_id, const std::vector<LogLine>& lines) = 0;
  // Lines of the job with cursor > after_cursor, by cursor, at most `limit`;
  // none once the job's logs were removed.
  virtual Result<std::vector<LogLine>> ReadLogs(int64_t job_id, int64_t after_cursor,
                                                int32_t limit) = 0;
  // The rank's last_offset, or -1 when nothing was taken for it. An agent
  // resumes shipping at that line (and skips it).
  virtual Result<int64_t> LastLogOffset(const std::string& attempt_id, int32_t rank) = 0;
  virtual Result<std::optional<LogStream>> GetLogStream(const std::string& attempt_id,
                                                        int32_t rank) = 0;
  // The job's log streams by attempt id, then rank; none once removed.
  virtual Result<std::vector<LogStream>> ListLogStreams(int64_t job_id) = 0;
  // See LogSkip. NotFound when the job does not exist; nothing for a job
  // whose logs were removed.
  virtual Status SkipLogs(const LogSkip& skip) = 0;
  virtual Result<LogTotals> GetLogTotals() = 0;
  // Terminal jobs that still have logs, the longest ended first (by
  // finished_ms, then id), at most `limit`.
  virtual Result<std::vector<JobLogSize>> ListEndedJobLogs(int32_t limit) = 0;
  // Removes the job's logs: they no longer count in GetLogTotals, ReadLogs
  // and ListLogStreams return nothing, GetLogRemoval says when and why.
  // Their storage is freed by DeleteRemovedLogChunks, in steps. Removing
  // them again, or those of a job without logs, changes nothing.
  virtual Status RemoveJobLogs(int64_t job_id, int64_t now_ms, const std::string& reason) = 0;
  virtual Result<std::optional<LogRemoval>> GetLogRemoval(int64_t job_id) = 0;
  // Frees the storage of at most `max_chunks` chunks of removed logs;
  // returns how many it freed (0: nothing is left to free).
  virtual Result<int64_t> DeleteRemovedLogChunks(int64_t max_chunks) = 0;
};

// Stored bytes: what the blob store's manifests are named by (for its
// garbage collection), what each user and group stores, and their quotas.
class StorageTx {
 public:
  virtual ~StorageTx() = default;

  // For blob garbage collection: the distinct manifest ids of every stored
  // checkpoint, and the distinct non-empty `inputs` of every job that is not
  // terminal; both sorted.
  virtual Result<std::vector<std::string>> ListCheckpointManifests() = 0;
  virtual Result<std::vector<std::string>> ListActiveJobInputs() = 0;

  // Storage accounting for quotas, kept by the store itself with every
  // change of jobs and checkpoints, whichever call makes it. A holder
  // stores the distinct manifests named by (a) the `inputs` of its jobs
  // that are not terminal, counted at Job::input_bytes, and (b) every
  // checkpoint of its jobs that is kept, counted at Checkpoint::bytes; the
  // user is the job's owner, the group its spec.group. A manifest named
  // several times by one holder counts once (at the largest size given).
  virtual Result<StorageUsage> StorageUsed(const StorageHolder& holder) = 0;
  // Every holder that stores something: users, then groups, each by name.
  virtual Result<std::vector<StorageUsage>> ListStorageUsage() = 0;
  // Stored bytes by the account that pays for them (storage charges,
  // server/accounting_service.h), as jobs pay: a lab's manifests (a group
  // with a GroupRecord) to "group:LAB"; a user's manifests that no lab
  // holds to "user:NAME". Accounts with bytes > 0, by account.
  virtual Result<std::vector<std::pair<std::string, int64_t>>> StorageByAccount() = 0;

  // Storage quotas: insert or replace by holder; delete (absent is no
  // error); by holder; all: users, then groups, each by name.
  virtual Status PutStorageQuota(const StorageQuota& q) = 0;
  virtual Status DeleteStorageQuota(const StorageHolder& holder) = 0;
  virtual Result<std::optional<StorageQuota>> GetStorageQuota(const StorageHolder& holder) = 0;
  virtual Result<std::vector<StorageQuota>> ListStorageQuotas() = 0;
};

// Ledger entries, in id order: those with `account` on either side ("" =
// every account), of `kind` (unset = any), with at_ms in [since_ms,
// until_ms), with id > after_id, at most `limit`.
struct LedgerQuery {
  std::string account;
  std::optional<accounting::EntryKind> kind;
  int64_t since_ms = INT64_MIN;
  int64_t until_ms = INT64_MAX;
  int64_t after_id = 0;
  int32_t limit = 1000;
};

// What usage reports group charges by.
enum class UsageBy { kJob, kUser, kGroup, kAccount, kNode, kModel, kDay, kMonth };
std::string_view UsageByName(UsageBy by);  // "job", "user", ..., "day", "month"
Result<UsageBy> ParseUsageBy(std::string_view name);

// A charge's key in a report by `by`. A charge counts at the time its
// interval starts (from_ms): its UTC day and month. (Charges never span a
// posting period, and periods divide days.)
std::string UsageKeyOf(const accounting::LedgerEntry& e, UsageBy by);

// Charges with from_ms in [since_ms, until_ms), of `group`, `user` and
// paid from `account` when set, summed per UsageBy key.
struct UsageQuery {
  UsageBy by = UsageBy::kUser;
  int64_t since_ms = INT64_MIN;
  int64_t until_ms = INT64_MAX;
  std::string group;
  std::string user;
  std::string account;
};

struct UsageRow {
  // The job id, user, group ("" for jobs of no group), account, node id,
  // GPU class ("" = free), UTC day "2026-11-26" or month "2026-11".
  std::string key;
  int64_t gpu_milli_ms = 0;  // GPU milli x ms held
  int64_t cpu_milli_ms = 0;
  accounting::Micros cost = 0;
  int64_t charges = 0;  // entries summed
  friend bool operator==(const UsageRow&, const UsageRow&) = default;
};

// What came into and went out of an account on one UTC day (of each
// entry's from_ms: when the use it charges began), by kind of entry.
struct AccountFlow {
  int64_t day_ms = 0;  // the day's first millisecond
  accounting::EntryKind kind = accounting::EntryKind::kCharge;
  accounting::Micros in = 0;   // entries crediting the account
  accounting::Micros out = 0;  // entries debiting it
  int64_t entries = 0;
  friend bool operator==(const AccountFlow&, const AccountFlow&) = default;
};

// Money (accounting/records.h, server/accounting_service.h): price
// versions, the double-entry ledger and the balances it moves.
class AccountingTx {
 public:
  virtual ~AccountingTx() = default;

  // Price versions are only ever added; ids increase. All, by id.
  virtual Result<int64_t> AddPrice(const accounting::PriceVersion& v) = 0;
  virtual Result<std::vector<accounting::PriceVersion>> ListPrices() = 0;

  // Appends `e` (its id assigned) and moves its amount from its debit to
  // its credit account's balance, in the same transaction. Returns false,
  // changing nothing, when an entry with e.key is already in the ledger:
  // posting is idempotent by key. Entries are never changed or removed.
  virtual Result<bool> PostEntry(const accounting::LedgerEntry& e) = 0;
  virtual Result<std::vector<accounting::LedgerEntry>> ListLedger(const LedgerQuery& q) = 0;
  // The end (at_ms) of the latest charge posted for an attempt's rank; 0
  // when none is.
  virtual Result<int64_t> PostedTo(const std::string& attempt_id, int32_t rank) = 0;

  // Balances: of every account with an entry, by account; of one (zero
  // with no entries when it has none).
  virtual Result<std::vector<accounting::AccountBalance>> ListBalances() = 0;
  virtual Result<accounting::AccountBalance> GetBalance(const std::string& account) = 0;

  // Usage reports over charges (grants and lending credits are not use),
  // by key.
  virtual Result<std::vector<UsageRow>> SumUsage(const UsageQuery& q) = 0;
  // What job `job_id`'s charges sum to, every attempt's.
  virtual Result<accounting::Micros> JobSpend(int64_t job_id) = 0;
  // `account`'s entries with from_ms in [since_ms, until_ms), summed per
  // day and kind, by day then kind.
  virtual Result<std::vector<AccountFlow>> AccountFlows(const std::string& account,
                                                        int64_t since_ms, int64_t until_ms) = 0;

  // Budgets: insert or replace by account; delete (absent is no error);
  // all, by account.
  virtual Status PutBudget(const accounting::Budget& b) = 0;
  virtual Status DeleteBudget(const std::string& account) = 0;
  virtual Result<std::vector<accounting::Budget>> ListBudgets() = 0;
};

// Small named values (e.g. per-node channel counters, settings).
class MetaTx {
 public:
  virtual ~MetaTx() = default;

  virtual Result<std::optional<std::string>> GetMeta(const std::string& key) = 0;
  virtual Status PutMeta(const std::string& key, const std::string& value) = 0;
};

// One transaction: every facet. A backend implements each facet's methods
// (SqlTx, MemoryTx); callers hold a Tx&.
class Tx : public JobsTx,
           public NodesTx,
           public IdentityTx,
           public LogsTx,
           public StorageTx,
           public AccountingTx,
           public MetaTx {
 public:
  ~Tx() override = default;
};

class Store {
 public:
  virtual ~Store() = default;
  // Runs `fn` in one transaction; commits if it returns OK, else rolls back
  // and returns its error.
  virtual Status Transact(const std::function<Status(Tx&)>& fn) = 0;
};

}  // namespace gpupool
