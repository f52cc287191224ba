// PgLeader: which of the gpupool servers on one PostgreSQL database leads.
//
// One row (gpupool_leader, made by PgStore::Open) holds the lease: the
// leader's id and address, when its lease ends (by the database's clock,
// so the servers' clocks do not matter) and the epoch, which grows by one
// at every change of leader. Each server calls Tick every renew interval:
// the leader extends its lease; a standby takes the lease only once it has
// ended, with a new epoch. The leader's store checks that epoch in every
// transaction (PgOptions::fence_epoch), so a deposed leader that still runs
// cannot change anything, and the new leader's takeover waits for the
// transactions the old one has in flight.
//
// Every Tick also records the server in gpupool_servers (its id, address,
// version and when it was last heard of): `gpupool admin servers` lists
// them (Servers), standbys included.
//
// Contract:
// - Tick's answer says who leads, in which epoch, at which address, and
//   for how much longer. A failure (the database unreachable) is
//   Unavailable: the caller keeps leading only until its lease ends by its
//   own clock, then stops acting as leader (server/standby.h LeaseKeeper).
// - Resign ends this server's lease at once (a clean shutdown), so that a
//   standby takes over at its next Tick rather than after the lease.
// - Every call's waits on the database together are bounded by a third of
//   the lease (connecting included): a database that stops answering, or
//   a partition in which TCP would wait for minutes, fails a Tick in time.
//
// Threading: thread-safe (calls take turns on one connection of its own,
// separate from the store's: a long transaction never delays a renewal).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool {

struct LeaderView {
  bool leading = false;        // this server holds the lease
  int64_t epoch = 0;           // the current epoch (0: nobody has ever led)
  std::string leader_id;       // "" when nobody holds a live lease
  std::string leader_address;  // the leader's API URL, for redirects
  int64_t lease_left_ms = 0;   // of the current lease, by the database's clock
};

struct PgLeaderOptions {
  std::string url;      // the store's database
  std::string id;       // unique per server process
  std::string address;  // this server's API URL (where clients are sent)
  std::string version;  // this server's gpupool version, for `gpupool admin servers`
  int64_t lease_ms = 6000;
};

// One server of the pool as the database last heard of it.
struct ServerSeen {
  std::string id, address, version;
  int64_t started_ms = 0;   // when it first took part (Unix ms, the database's clock)
  int64_t seen_ago_ms = 0;  // since its last Tick
  bool leading = false;     // holds the live lease
};

class PgLeader {
 public:
  static Result<std::unique_ptr<PgLeader>> Connect(const PgLeaderOptions& options);
  ~PgLeader();
  PgLeader(const PgLeader&) = delete;
  PgLeader& operator=(const PgLeader&) = delete;

  // Takes or renews the lease if it can; says who leads.
  Result<LeaderView> Tick();
  // Ends this server's lease now (if it holds it) and takes it off the
  // list of servers.
  Status Resign();
  // Every server that has called Tick in the last hour, oldest first, and
  // the current epoch. (Servers silent for longer are forgotten here.)
  Result<std::vector<ServerSeen>> Servers(int64_t* epoch);
  // The API URL this server is reached at (once its port is known).
  void set_address(std::string address);

  struct Impl;

 private:
  explicit PgLeader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool
