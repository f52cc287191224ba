// EventLoop on a single-threaded boost::asio::io_context.
#include "net/event_loop.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <unordered_map>
#include <vector>

#include "common/log.h"

namespace gpupool::net {

namespace asio = boost::asio;

namespace {

// One watched fd, for reading, writing or both: Asio registers a descriptor
// with the reactor once, so both directions share one stream_descriptor.
// Shared by the map entry and the pending wait handlers, so that UnwatchFd()
// from inside a callback leaves the callback alive.
struct FdWatch {
  FdWatch(asio::io_context& ioc, int fd) : sd(ioc, fd) {}
  asio::posix::stream_descriptor sd;
  std::function<bool()> on_read;   // empty: not watched for reading
  std::function<bool()> on_write;  // empty: not watched for writing
  bool read_armed = false;
  bool write_armed = false;
};

}  // namespace

struct EventLoop::Impl {
  // Declared first: destroyed last, after every I/O object below.
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  TimerId next_timer = 1;
  std::unordered_map<TimerId, std::unique_ptr<asio::steady_timer>> timers;
  std::vector<std::unique_ptr<asio::signal_set>> signal_sets;
  std::unordered_map<int, std::shared_ptr<FdWatch>> watches;

  ~Impl() {
    // The loop never owns watched fds: give them back before the descriptors
    // are destroyed (here or inside pending handlers).
    for (auto& [fd, w] : watches) {
      boost::system::error_code ec;
      w->sd.cancel(ec);
      w->sd.release();
    }
    watches.clear();
    timers.clear();
    signal_sets.clear();
  }

  std::shared_ptr<FdWatch> WatchFor(int fd) {
    auto it = watches.find(fd);
    if (it != watches.end()) return it->second;
    auto w = std::make_shared<FdWatch>(ioc, fd);
    watches.emplace(fd, w);
    return w;
  }

  // Arms one wait in direction `write`; its callback re-arms while it
  // returns true, and the fd is released once neither direction is watched.
  void Arm(int fd, const std::shared_ptr<FdWatch>& w, bool write) {
    bool& armed = write ? w->write_armed : w->read_armed;
    if (armed) return;
    armed = true;
    auto type = write ? asio::posix::stream_descriptor::wait_write
                      : asio::posix::stream_descriptor::wait_read;
    w->sd.async_wait(type, [this, fd, w, write](const boost::system::error_code& ec) {
      (write ? w->write_armed : w->read_armed) = false;
      if (ec) return;  // cancelled (unwatched) or failed
      auto it = watches.find(fd);
      if (it == watches.end() || it->second != w) return;
      std::function<bool()>& fn = write ? w->on_write : w->on_read;
      if (!fn) return;
      auto call = fn;  // fn may replace itself
      bool keep = call();
      it = watches.find(fd);  // the callback may have changed the map
      if (it == watches.end() || it->second != w) return;
      if (keep) {
        Arm(fd, w, write);
      } else {
        (write ? w->on_write : w->on_read) = nullptr;
        if (!w->on_read && !w->on_write) Unwatch(it);
      }
    });
  }

  void Unwatch(std::unordered_map<int, std::shared_ptr<FdWatch>>::iterator it) {
    boost::system::error_code ec;
    it->second->sd.cancel(ec);
    it->second->sd.release();  // never close: the caller owns the fd
    watches.erase(it);
  }

  void WaitSignal(asio::signal_set* set, std::shared_ptr<std::function<void(int)>> fn) {
    set->async_wait([this, set, fn](const boost::system::error_code& ec, int signo) {
      if (ec) return;
      (*fn)(signo);
      WaitSignal(set, fn);
    });
  }
};

EventLoop::EventLoop() : impl_(std::make_unique<Impl>()) {}

EventLoop::~EventLoop() = default;

void EventLoop::Run() {
  impl_->ioc.run();
  // Allow a later Run() after Stop().
  impl_->ioc.restart();
}

void EventLoop::Stop() { impl_->ioc.stop(); }

void EventLoop::Post(std::function<void()> fn) { asio::post(impl_->ioc, std::move(fn)); }

EventLoop::TimerId EventLoop::RunAfter(int64_t delay_ms, std::function<void()> fn) {
  TimerId id = impl_->next_timer++;
  auto timer = std::make_unique<asio::steady_timer>(impl_->ioc);
  timer->expires_after(std::chrono::milliseconds(delay_ms < 0 ? 0 : delay_ms));
  Impl* impl = impl_.get();
  timer->async_wait([impl, id, fn = std::move(fn)](const boost::system::error_code& ec) {
    if (ec) return;
    // Cancel() may have run after expiry but before this handler: the map
    // entry is the source of truth.
    auto it = impl->timers.find(id);
    if (it == impl->timers.end()) return;
    impl->timers.erase(it);
    fn();
  });
  impl_->timers.emplace(id, std::move(timer));
  return id;
}

void EventLoop::Cancel(TimerId id) {
  auto it = impl_->timers.find(id);
  if (it == impl_->timers.end()) return;
  it->second->cancel();
  impl_->timers.erase(it);
}

void EventLoop::OnSignals(std::initializer_list<int> signals, std::function<void(int)> fn) {
  auto set = std::make_unique<asio::signal_set>(impl_->ioc);
  for (int s : signals) {
    boost::system::error_code ec;
    set->add(s, ec);
    if (ec) {
      GP_LOG(kWarn) << "cannot watch signal " << s << ": " << ec.message();
    }
  }
  impl_->WaitSignal(set.get(), std::make_shared<std::function<void(int)>>(std::move(fn)));
  impl_->signal_sets.push_back(std::move(set));
}

void EventLoop::WatchReadable(int fd, std::function<bool()> fn) {
  auto w = impl_->WatchFor(fd);
  w->on_read = std::move(fn);
  impl_->Arm(fd, w, false);
}

void EventLoop::WatchWritable(int fd, std::function<bool()> fn) {
  auto w = impl_->WatchFor(fd);
  w->on_write = std::move(fn);
  impl_->Arm(fd, w, true);
}

void EventLoop::UnwatchFd(int fd) {
  auto it = impl_->watches.find(fd);
  if (it != impl_->watches.end()) impl_->Unwatch(it);
}

void* EventLoop::native_handle() { return &impl_->ioc; }

}  // namespace gpupool::net
