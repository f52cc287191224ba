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

// One watched fd. Shared by the map entry and the pending wait handler, so
// that UnwatchFd() from inside the callback leaves the callback alive.
struct FdWatch {
  FdWatch(asio::io_context& ioc, int fd, std::function<bool()> f) : sd(ioc, fd), fn(std::move(f)) {}
  asio::posix::stream_descriptor sd;
  std::function<bool()> fn;
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

  void ArmWatch(int fd, const std::shared_ptr<FdWatch>& w) {
    w->sd.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, fd, w](const boost::system::error_code& ec) {
                       if (ec) return;  // cancelled (unwatched) or failed
                       auto it = watches.find(fd);
                       if (it == watches.end() || it->second != w) return;
                       bool keep = w->fn();
                       it = watches.find(fd);  // fn may have changed the map
                       if (it == watches.end() || it->second != w) return;
                       if (keep) {
                         ArmWatch(fd, w);
                       } else {
                         Unwatch(it);
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
  UnwatchFd(fd);
  auto w = std::make_shared<FdWatch>(impl_->ioc, fd, std::move(fn));
  impl_->watches.emplace(fd, w);
  impl_->ArmWatch(fd, w);
}

void EventLoop::UnwatchFd(int fd) {
  auto it = impl_->watches.find(fd);
  if (it != impl_->watches.end()) impl_->Unwatch(it);
}

void* EventLoop::native_handle() { return &impl_->ioc; }

}  // namespace gpupool::net
