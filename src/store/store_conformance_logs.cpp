// The Store conformance suite (store/store_conformance.h): the logs facet
// (LogsTx): appending, reading and deduplicating lines, log streams, the
// output limit's bookkeeping and log retention.
#include <string>
#include <vector>

#include "model/job_output.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers

Result<int64_t> AddJob(Store& store, JobState state, int64_t finished_ms = 0) {
  return InTx(store, [&](Tx& tx) {
    Job j;
    j.owner = "alice";
    j.spec.name = "logs";
    j.spec.run = "yes";
    j.state = state;
    j.created_ms = 1;
    j.updated_ms = finished_ms > 0 ? finished_ms : 2;
    j.finished_ms = finished_ms;
    return tx.InsertJob(j);
  });
}

LogLine RankLine(std::string attempt_id, int64_t offset, std::string text, int32_t rank = 0,
                 std::string stream = "stdout") {
  LogLine l = Line(std::move(attempt_id), offset, std::move(text), std::move(stream));
  l.rank = rank;
  return l;
}

TEST_P(StoreConformanceTest, LogsAppendDedupeReadAndEnd) {
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  CONF_ASSERT_OK(Insert(store(), MakeJob("alice", RunSpec())));
  const std::string unicode =
      "\xC3\xBCn\xC3\xAF"
      "code";  // 9 bytes, 7 characters
  std::vector<LogLine> first = {Line("1.1", 0, "hello"), Line("1.1", 6, "world", "stderr"),
                                Line("1.1", 12, unicode), Line("1.1", 6, "world again")};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, first));
    GP_RETURN_IF_ERROR(tx.AppendLogs(2, {Line("2.1", 0, "other job")}));
    // A resent batch: every line already stored is skipped.
    GP_RETURN_IF_ERROR(tx.AppendLogs(1, {Line("1.1", 0, "HELLO"), Line("1.1", 22, "")}));
    return tx.AppendLogs(1, {Line("1.2", 0, "second attempt"), Line("1.2", 15, "x")});
  }));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    // A rank's lines come in offset order: one below the highest offset
    // taken is a resend, even when its offset was never stored.
    return tx.AppendLogs(1, {Line("1.1", 6, "late duplicate"), Line("1.2", 100, "far"),
                             Line("1.2", 50, "earlier offset, appended later")});
  }));

  std::vector<LogLine> want = {first[0],
                               first[1],
                               first[2],
                               Line("1.1", 22, ""),
                               Line("1.2", 0, "second attempt"),
                               Line("1.2", 15, "x"),
                               Line("1.2", 100, "far")};
  CONF_ASSERT_OK_AND_ASSIGN(auto got,
                            InTx(store(), [](Tx& tx) { return tx.ReadLogs(1, 0, 1000); }));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(got[i].cursor, got[i - 1].cursor);
    }
    EXPECT_GT(got[i].cursor, 0);
    LogLine w = want[i];
    w.cursor = got[i].cursor;
    EXPECT_EQ(got[i], w) << "line " << i;
  }

  // Paging by cursor and limit yields the same lines.
  std::vector<LogLine> paged;
  int64_t cursor = 0;
  while (true) {
    CONF_ASSERT_OK_AND_ASSIGN(auto page,
                              InTx(store(), [&](Tx& tx) { return tx.ReadLogs(1, cursor, 3); }));
    EXPECT_LE(page.size(), 3u);
    if (page.empty()) break;
    paged.insert(paged.end(), page.begin(), page.end());
    cursor = page.back().cursor;
  }
  EXPECT_EQ(paged, got);
  CONF_ASSERT_OK_AND_ASSIGN(
      auto tail, InTx(store(), [&](Tx& tx) { return tx.ReadLogs(1, got[5].cursor, 100); }));
  EXPECT_EQ(tail, (std::vector<LogLine>{got[6]}));

  CONF_ASSERT_OK_AND_ASSIGN(auto job2, InTx(store(), [](Tx& tx) { return tx.ReadLogs(2, 0, 10); }));
  ASSERT_EQ(job2.size(), 1u);
  EXPECT_EQ(job2[0].text, "other job");
  CONF_ASSERT_OK_AND_ASSIGN(auto job3, InTx(store(), [](Tx& tx) { return tx.ReadLogs(3, 0, 10); }));
  EXPECT_TRUE(job3.empty());

  auto end = [&](const std::string& attempt) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.LastLogOffset(attempt, 0); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.value_or(-1);
  };
  EXPECT_EQ(end("1.1"), 22);
  EXPECT_EQ(end("1.2"), 100);  // highest offset, not last appended
  EXPECT_EQ(end("2.1"), 0);
  EXPECT_EQ(end("7.1"), -1);
  CONF_ASSERT_OK(
      InTx(store(), [&](Tx& tx) { return tx.AppendLogs(2, {Line("2.2", 40, unicode)}); }));
  EXPECT_EQ(end("2.2"), 40);
}

TEST_P(StoreConformanceTest, LogsOfMissingJobAreNotFound) {
  Status st = InTx(store(), [](Tx& tx) { return tx.AppendLogs(5, {Line("5.1", 0, "x")}); });
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
}

TEST_P(StoreConformanceTest, LogStreamsCountWhatIsStored) {
  CONF_ASSERT_OK_AND_ASSIGN(int64_t job, AddJob(store(), JobState::kRunning));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) {
    return tx.AppendLogs(job, {RankLine("1.1", 0, "hello"), RankLine("1.1", 26, ""),
                               RankLine("1.1", 47, "event", 0, "event"),
                               RankLine("1.1", 0, "resend"), RankLine("1.1", 10, "rank 1", 1)});
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto rank0,
                            InTx(store(), [](Tx& tx) { return tx.GetLogStream("1.1", 0); }));
  ASSERT_TRUE(rank0.has_value());
  EXPECT_EQ(rank0->job_id, job);
  EXPECT_EQ(rank0->lines, 3);
  EXPECT_EQ(rank0->bytes, LogLineCost("hello") + LogLineCost("") + LogLineCost("event"));
  EXPECT_EQ(rank0->last_offset, 47);
  EXPECT_GT(rank0->stored_bytes, 0);
  EXPECT_EQ(rank0->limit_reached_ms, 0);
  CONF_ASSERT_OK_AND_ASSIGN(auto none,
                            InTx(store(), [](Tx& tx) { return tx.GetLogStream("1.2", 0); }));
  EXPECT_FALSE(none.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto streams,
                            InTx(store(), [&](Tx& tx) { return tx.ListLogStreams(job); }));
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_EQ(streams[0], *rank0);
  EXPECT_EQ(streams[1].rank, 1);
  EXPECT_EQ(streams[1].lines, 1);
  CONF_ASSERT_OK_AND_ASSIGN(auto totals, InTx(store(), [](Tx& tx) { return tx.GetLogTotals(); }));
  EXPECT_EQ(totals.jobs, 1);
  EXPECT_EQ(totals.lines, 4);
  EXPECT_EQ(totals.bytes, rank0->bytes + LogLineCost("rank 1"));
  EXPECT_EQ(totals.stored_bytes, rank0->stored_bytes + streams[1].stored_bytes);
}

TEST_P(StoreConformanceTest, SkippedLogsMoveTheOffsetAndTheLimitIsReachedOnce) {
  CONF_ASSERT_OK_AND_ASSIGN(int64_t job, AddJob(store(), JobState::kRunning));
  const std::string marker = OutputLimitMarker(1024);
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendLogs(job, {RankLine("1.1", 0, "a")}));
    // A stream nothing was stored for yet may be skipped too.
    GP_RETURN_IF_ERROR(tx.SkipLogs(LogSkip{job, "1.1", 2, 500, "", 0}));
    return tx.SkipLogs(LogSkip{job, "1.1", 0, 900, marker, 77});
  }));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    // Later skips neither move the offset back nor replace the marker.
    GP_RETURN_IF_ERROR(tx.SkipLogs(LogSkip{job, "1.1", 0, 400, "another", 99}));
    // Lines at or below the skipped offset are resends.
    return tx.AppendLogs(job, {RankLine("1.1", 800, "dropped before"), RankLine("1.1", 901, "b")});
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto s,
                            InTx(store(), [](Tx& tx) { return tx.GetLogStream("1.1", 0); }));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->last_offset, 901);
  EXPECT_EQ(s->lines, 2);
  EXPECT_EQ(s->limit_reached_ms, 77);
  EXPECT_EQ(s->limit_event, marker);
  CONF_ASSERT_OK_AND_ASSIGN(int64_t rank2,
                            InTx(store(), [](Tx& tx) { return tx.LastLogOffset("1.1", 2); }));
  EXPECT_EQ(rank2, 500);
  CONF_ASSERT_OK_AND_ASSIGN(auto lines,
                            InTx(store(), [&](Tx& tx) { return tx.ReadLogs(job, 0, 10); }));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].text, "b");
  Status missing = InTx(store(), [](Tx& tx) {
    return tx.SkipLogs(LogSkip{42, "42.1", 0, 5, "", 0});
  });
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
}

TEST_P(StoreConformanceTest, EndedJobLogsAreListedLongestEndedFirst) {
  CONF_ASSERT_OK_AND_ASSIGN(int64_t running, AddJob(store(), JobState::kRunning));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t late, AddJob(store(), JobState::kSucceeded, 3000));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t early, AddJob(store(), JobState::kFailed, 1000));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t silent, AddJob(store(), JobState::kCancelled, 500));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    for (int64_t job : {running, late, early}) {
      std::string a = std::to_string(job) + ".1";
      GP_RETURN_IF_ERROR(tx.AppendLogs(job, {RankLine(a, 0, "x"), RankLine(a, 2, "yy")}));
    }
    return Status::Ok();
  }));
  (void)silent;  // ended, but without logs: not listed
  CONF_ASSERT_OK_AND_ASSIGN(auto ended,
                            InTx(store(), [](Tx& tx) { return tx.ListEndedJobLogs(10); }));
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0], (JobLogSize{early, 1000, 2, LogLineCost("x") + LogLineCost("yy"),
                                  ended[0].stored_bytes}));
  EXPECT_GT(ended[0].stored_bytes, 0);
  EXPECT_EQ(ended[1].job_id, late);
  EXPECT_EQ(ended[1].finished_ms, 3000);
  CONF_ASSERT_OK_AND_ASSIGN(auto one, InTx(store(), [](Tx& tx) { return tx.ListEndedJobLogs(1); }));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].job_id, early);

  // The running job ends: it is listed from then on.
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(running));
    job->state = JobState::kSucceeded;
    job->finished_ms = 2000;
    return tx.UpdateJob(*job);
  }));
  CONF_ASSERT_OK_AND_ASSIGN(ended, InTx(store(), [](Tx& tx) { return tx.ListEndedJobLogs(10); }));
  ASSERT_EQ(ended.size(), 3u);
  EXPECT_EQ(ended[1].job_id, running);
}

TEST_P(StoreConformanceTest, RemovedLogsAreGoneAndStayGone) {
  CONF_ASSERT_OK_AND_ASSIGN(int64_t gone, AddJob(store(), JobState::kSucceeded, 1000));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t kept, AddJob(store(), JobState::kSucceeded, 2000));
  std::vector<LogLine> many;
  for (int i = 0; i < 3000; ++i) many.push_back(RankLine("1.1", i * 40, std::string(30, 'q')));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.AppendLogs(gone, many));
    return tx.AppendLogs(kept, {RankLine("2.1", 0, "kept")});
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto before, InTx(store(), [](Tx& tx) { return tx.GetLogTotals(); }));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.RemoveJobLogs(gone, 5000, "retention: ended 30d ago"));
    // Again, and for a job that never had logs: nothing changes.
    GP_RETURN_IF_ERROR(tx.RemoveJobLogs(gone, 6000, "again"));
    return tx.RemoveJobLogs(99, 6000, "no such job");
  }));
  CONF_ASSERT_OK_AND_ASSIGN(auto removal,
                            InTx(store(), [&](Tx& tx) { return tx.GetLogRemoval(gone); }));
  ASSERT_TRUE(removal.has_value());
  EXPECT_EQ(removal->removed_ms, 5000);
  EXPECT_EQ(removal->reason, "retention: ended 30d ago");
  EXPECT_EQ(removal->lines, 3000);
  EXPECT_GT(removal->stored_bytes, 0);
  CONF_ASSERT_OK_AND_ASSIGN(auto other,
                            InTx(store(), [&](Tx& tx) { return tx.GetLogRemoval(kept); }));
  EXPECT_FALSE(other.has_value());

  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) -> Status {
    // A late resend of the removed job's lines stores nothing.
    GP_RETURN_IF_ERROR(
        tx.AppendLogs(gone, {RankLine("1.1", 0, "resent"), RankLine("1.2", 0, "new")}));
    GP_ASSIGN_OR_RETURN(auto lines, tx.ReadLogs(gone, 0, 100));
    EXPECT_TRUE(lines.empty());
    GP_ASSIGN_OR_RETURN(auto streams, tx.ListLogStreams(gone));
    EXPECT_TRUE(streams.empty());
    GP_ASSIGN_OR_RETURN(auto totals, tx.GetLogTotals());
    EXPECT_EQ(totals.jobs, 1);
    EXPECT_EQ(totals.lines, before.lines - 3000);
    EXPECT_EQ(totals.stored_bytes, before.stored_bytes - removal->stored_bytes);
    GP_ASSIGN_OR_RETURN(auto ended, tx.ListEndedJobLogs(10));
    EXPECT_EQ(ended.size(), 1u);
    GP_ASSIGN_OR_RETURN(auto kept_lines, tx.ReadLogs(kept, 0, 100));
    EXPECT_EQ(kept_lines.size(), 1u);
    return Status::Ok();
  }));

  // Freeing the storage takes bounded steps and ends.
  int64_t steps = 0;
  while (true) {
    CONF_ASSERT_OK_AND_ASSIGN(int64_t n,
                              InTx(store(), [](Tx& tx) { return tx.DeleteRemovedLogChunks(2); }));
    EXPECT_LE(n, 2);
    if (n == 0) break;
    ASSERT_LT(++steps, 100000);
  }
  Reopen();
  CONF_ASSERT_OK_AND_ASSIGN(removal, InTx(store(), [&](Tx& tx) { return tx.GetLogRemoval(gone); }));
  EXPECT_TRUE(removal.has_value());
  CONF_ASSERT_OK_AND_ASSIGN(auto kept_lines,
                            InTx(store(), [&](Tx& tx) { return tx.ReadLogs(kept, 0, 100); }));
  EXPECT_EQ(kept_lines.size(), 1u);
}

}  // namespace
}  // namespace gpupool
