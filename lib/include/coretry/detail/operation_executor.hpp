#ifndef CORETRY_DETAIL_OPERATION_EXECUTOR_HPP
#define CORETRY_DETAIL_OPERATION_EXECUTOR_HPP

// Where an operation's own steps run (a serial executor: one step at a time,
// whatever thread runs them) and how work is counted on the executor its
// caller's handler will run on.

#include <coretry/detail/single_threaded.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>

#include <type_traits>

namespace coretry::detail {

template <class Executor>
struct is_strand : std::false_type {};
template <class Inner>
struct is_strand<boost::asio::strand<Inner>> : std::true_type {};

/// True when `ex` is known to run handlers one at a time: a strand, directly
/// or inside an any_io_executor, or the executor of a single-threaded
/// io_context (an io_context per thread needs no strand per operation).
template <class Executor>
bool is_serial_executor(const Executor& ex) {
  if constexpr (is_strand<Executor>::value) {
    return true;
  } else if constexpr (std::is_same_v<Executor, boost::asio::io_context::executor_type>) {
    return is_single_threaded(ex.context());
  } else if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    // The commonest first: each type that does not match costs a
    // comparison of type names.
    if (const auto* io = ex.template target<boost::asio::io_context::executor_type>())
      return is_single_threaded(io->context());
    using io_strand = boost::asio::strand<boost::asio::io_context::executor_type>;
    return ex.template target<io_strand>() != nullptr ||
           ex.template target<boost::asio::strand<boost::asio::any_io_executor>>() != nullptr;
  } else {
    (void)ex;
    return false;
  }
}

/// The execution context an executor submits to.
template <class Executor>
boost::asio::execution_context& context_of(const Executor& ex) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value)
    return boost::asio::query(ex, boost::asio::execution::context);
  else
    return ex.context();
}

/// The executor an operation runs its steps on: the completion handler's own
/// executor when that is serial and of the I/O executor's execution context
/// (no allocation, and the caller's cancellation is then serialised with the
/// operation), else the I/O executor when that is serial, else a new strand
/// of it. Steps never run on another context than the I/O's: an io_context
/// destroyed with the operation pending destroys every step still queued,
/// and none is left to run later against its dead services. `is_handlers`,
/// when given, is set to whether it is the handler's own executor.
template <class HandlerExecutor, class Executor>
boost::asio::any_io_executor make_operation_strand(const HandlerExecutor& handler_ex, const Executor& io_ex,
                                                   bool* is_handlers = nullptr) {
  if (is_handlers) *is_handlers = false;
  if constexpr (std::is_same_v<HandlerExecutor, boost::asio::any_io_executor> &&
                std::is_same_v<Executor, boost::asio::any_io_executor>) {
    // The commonest case: both an io_context's executor. The same choice as
    // below, without the type-erased queries of their contexts.
    using io_executor = boost::asio::io_context::executor_type;
    const auto* handlers = handler_ex.template target<io_executor>();
    const auto* io = handlers ? io_ex.template target<io_executor>() : nullptr;
    if (io) {
      const bool serial = is_single_threaded(io->context());
      if (&handlers->context() == &io->context() && serial) {
        if (is_handlers) *is_handlers = true;
        return handler_ex;
      }
      if (serial) return io_ex;
      return boost::asio::make_strand(*io);
    }
  }
  if constexpr (std::is_convertible_v<HandlerExecutor, boost::asio::any_io_executor>)
    if (is_serial_executor(handler_ex) && &context_of(handler_ex) == &context_of(io_ex)) {
      if (is_handlers) *is_handlers = true;
      return handler_ex;
    }
  if (is_serial_executor(io_ex)) return io_ex;
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    // A strand of the io_context's own executor fits inside an
    // any_io_executor; a strand of the any_io_executor would not, and would
    // be one more block shared (and counted) by every copy.
    if (const auto* io = io_ex.template target<boost::asio::io_context::executor_type>())
      return boost::asio::make_strand(*io);
  }
  return boost::asio::make_strand(io_ex);
}

/// True when boost::asio::dispatch through `ex` (a handler's executor,
/// tracking work) would call the handler at once: `ex` is an io_context's
/// executor, possibly blocking, and this thread is running that io_context.
/// The caller then calls it itself, without the copies of `ex` and the
/// type-erased function dispatch would make on the way.
inline bool dispatches_in_place(const boost::asio::any_io_executor& ex) noexcept {
  using tracked = boost::asio::io_context::basic_executor_type<std::allocator<void>, 4>; // outstanding_work.tracked
  const auto* io = ex.target<tracked>();
  return io != nullptr && io->running_in_this_thread();
}

/// Work counted on a handler's executor until the handler has been called:
/// the executor itself, preferred as tracking work (one executor, where a
/// work guard keeps two), or a work guard for an executor of the older model.
template <class Executor, class = void>
class handler_work {
public:
  explicit handler_work(const Executor& ex) : guard_(ex) {}
  Executor executor() const { return guard_.get_executor(); }

private:
  boost::asio::executor_work_guard<Executor> guard_;
};
template <class Executor>
class handler_work<Executor, std::enable_if_t<boost::asio::execution::is_executor<Executor>::value>> {
public:
  explicit handler_work(const Executor& ex)
      : executor_(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked)) {}
  const auto& executor() const noexcept { return executor_; }

private:
  std::decay_t<decltype(boost::asio::prefer(std::declval<const Executor&>(),
                                            boost::asio::execution::outstanding_work.tracked))>
      executor_;
};

} // namespace coretry::detail

#endif
