#include <coretry/testing/clock.hpp>
#include <coretry/testing/random.hpp>
#include <coretry/testing/runner.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace coretry::testing {

namespace asio = boost::asio;

boost::asio::execution_context::id manual_time_service::id;

struct manual_time_service::pending_wait {
  // Built, never assigned: Boost 1.81's any_completion_handler move assignment
  // re-wraps the handler in itself endlessly, its move constructor is sound.
  explicit pending_wait(asio::any_completion_handler<void(boost::system::error_code)>&& h)
      : slot(h.get_cancellation_slot()), handler(std::move(h)) {}

  asio::cancellation_slot slot;
  std::uint64_t id = 0;
  std::uint64_t timer = 0;
  std::multimap<manual_clock::time_point, std::uint64_t>::iterator position;
  std::multimap<std::uint64_t, std::uint64_t>::iterator timer_position;
  asio::any_completion_handler<void(boost::system::error_code)> handler;
  asio::any_io_executor work; // keeps the io_context from running out of work
};

manual_time_service::manual_time_service(asio::execution_context& context)
    : asio::execution_context::service(context) {}

manual_time_service::~manual_time_service() { shutdown(); }

manual_clock::time_point manual_time_service::now() const {
  std::lock_guard lock(mutex_);
  return now_;
}

manual_clock::time_point manual_time_service::due(manual_clock::time_point expiry) const {
  return expiry >= manual_clock::time_point::max() - lateness_ ? manual_clock::time_point::max() : expiry + lateness_;
}

std::optional<manual_clock::time_point> manual_time_service::next_expiry() const {
  std::lock_guard lock(mutex_);
  if (by_expiry_.empty()) return std::nullopt;
  return due(by_expiry_.begin()->first);
}

void manual_time_service::set_lateness(manual_clock::duration late) {
  if (late < manual_clock::duration::zero()) throw std::invalid_argument("manual clock lateness must not be negative");
  std::lock_guard lock(mutex_);
  lateness_ = late;
}

manual_clock::duration manual_time_service::lateness() const {
  std::lock_guard lock(mutex_);
  return lateness_;
}

std::size_t manual_time_service::pending_waits() const {
  std::lock_guard lock(mutex_);
  return waits_.size();
}

std::uint64_t manual_time_service::new_timer_id() {
  std::lock_guard lock(mutex_);
  return next_id_++;
}

void manual_time_service::add_wait(std::uint64_t timer, manual_clock::time_point expiry,
                                   asio::any_completion_handler<void(boost::system::error_code)> handler,
                                   const asio::any_io_executor& io_executor) {
  auto wait = std::make_unique<pending_wait>(std::move(handler));
  wait->timer = timer;
  wait->work = asio::prefer(io_executor, asio::execution::outstanding_work.tracked);

  std::lock_guard lock(mutex_);
  wait->id = next_id_++;
  const std::uint64_t wait_id = wait->id;
  wait->position = by_expiry_.emplace(expiry, wait_id);
  wait->timer_position = by_timer_.emplace(timer, wait_id);
  pending_wait& stored = *wait;
  waits_.emplace(wait_id, wait.release());
  if (due(expiry) <= now_) {
    // Already due: complete through the executor, never inside async_wait.
    complete(stored, {}, false);
    return;
  }
  if (stored.slot.is_connected())
    stored.slot.assign([this, wait_id](asio::cancellation_type) { cancel_wait(wait_id, true); });
}

void manual_time_service::complete(pending_wait& wait, boost::system::error_code ec, bool clear_slot) {
  // Called with mutex_ held.
  by_expiry_.erase(wait.position);
  by_timer_.erase(wait.timer_position);
  waits_.erase(wait.id);
  std::unique_ptr<pending_wait> owned(&wait);
  if (clear_slot && owned->slot.is_connected()) owned->slot.clear();
  asio::post(owned->work, asio::append(std::move(owned->handler), ec));
}

void manual_time_service::cancel_wait(std::uint64_t wait, bool from_slot) {
  std::lock_guard lock(mutex_);
  auto found = waits_.find(wait);
  if (found == waits_.end()) return;
  // From inside the slot's own handler the slot must not be cleared: that
  // would destroy the handler while it runs. It is replaced or cleared later.
  complete(*found->second, asio::error::operation_aborted, !from_slot);
}

std::size_t manual_time_service::cancel_timer(std::uint64_t timer) {
  std::lock_guard lock(mutex_);
  std::vector<pending_wait*> matching;
  auto [first, last] = by_timer_.equal_range(timer);
  for (auto it = first; it != last; ++it) matching.push_back(waits_.at(it->second));
  for (pending_wait* wait : matching) complete(*wait, asio::error::operation_aborted, true);
  return matching.size();
}

std::size_t manual_time_service::advance_to(manual_clock::time_point t) {
  std::lock_guard lock(mutex_);
  if (t > now_) now_ = t;
  std::size_t fired = 0;
  while (!by_expiry_.empty() && due(by_expiry_.begin()->first) <= now_) {
    complete(*waits_.at(by_expiry_.begin()->second), {}, true);
    ++fired;
  }
  return fired;
}

void manual_time_service::shutdown() {
  std::vector<std::unique_ptr<pending_wait>> abandoned;
  {
    std::lock_guard lock(mutex_);
    for (auto& [wait_id, wait] : waits_) abandoned.emplace_back(wait);
    waits_.clear();
    by_expiry_.clear();
    by_timer_.clear();
  }
  // Destroyed outside the lock: a handler's destructor may touch timers.
  for (auto& wait : abandoned)
    if (wait->slot.is_connected()) wait->slot.clear();
}

manual_runner::manual_runner(asio::io_context& io)
    : io_(io), service_(&asio::use_service<manual_time_service>(io)) {}

void manual_runner::run_ready() {
  io_.restart();
  while (io_.poll() != 0) {
  }
}

void manual_runner::run() {
  for (;;) {
    run_ready();
    if (io_.stopped()) return; // no work left at all
    const auto next = service_->next_expiry();
    if (!next)
      throw deadlock_error("manual_runner: work remains but no handler is ready and no timer is pending");
    service_->advance_to(*next);
  }
}

void manual_runner::run_until(manual_clock::time_point t) {
  for (;;) {
    run_ready();
    const auto next = service_->next_expiry();
    if (!next || *next > t) break;
    service_->advance_to(*next);
  }
  service_->advance_to(t);
  run_ready();
}

scripted_random::scripted_random(std::initializer_list<double> fractions) : fractions_(fractions) {
  for (double f : fractions_)
    if (!(f >= 0.0 && f <= 1.0)) throw std::invalid_argument("scripted_random: every fraction must be in [0, 1]");
}

std::uint64_t scripted_random::uniform(std::uint64_t max_inclusive) {
  if (next_ >= fractions_.size())
    throw std::logic_error("scripted_random: the test scripted " + std::to_string(fractions_.size()) +
                           " draws and the code asked for another");
  const long double scaled = static_cast<long double>(fractions_[next_++]) * max_inclusive;
  return static_cast<std::uint64_t>(std::llround(scaled));
}

std::uint64_t seeded_random::next() noexcept {
  // splitmix64: tiny, fast and well distributed; reproducibility is the point.
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t seeded_random::uniform(std::uint64_t max_inclusive) {
  if (max_inclusive == UINT64_MAX) return next();
  const std::uint64_t range = max_inclusive + 1;
  // Rejection sampling keeps the draw exactly uniform.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  std::uint64_t x;
  do x = next();
  while (x >= limit);
  return x % range;
}

} // namespace coretry::testing
