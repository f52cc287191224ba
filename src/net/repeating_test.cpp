// net::Repeating on a real event loop: it repeats, and a run that ends later
// (its Done called from another timer) is not started again before then.
#include "net/repeating.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpupool::net {
namespace {

TEST(RepeatingTest, RunsAgainAfterEachRunEnds) {
  EventLoop loop;
  int runs = 0;
  Repeating task(loop, 0, 1, [&](const Repeating::Done& done) {
    if (++runs == 5) loop.Stop();
    done();
  });
  loop.Run();
  EXPECT_EQ(runs, 5);
}

TEST(RepeatingTest, AnAsynchronousRunIsNeverOverlapped) {
  EventLoop loop;
  int running = 0, most_at_once = 0, runs = 0;
  std::vector<Repeating::Done> pending;
  // Each run ends 5 ms after it started, five times its interval.
  Repeating task(loop, 0, 1, [&](Repeating::Done done) {
    most_at_once = std::max(most_at_once, ++running);
    if (++runs == 4) {
      loop.Stop();
      return;
    }
    loop.RunAfter(5, [&running, done = std::move(done)] {
      --running;
      done();
    });
  });
  loop.Run();
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(most_at_once, 1);
}

}  // namespace
}  // namespace gpupool::net
