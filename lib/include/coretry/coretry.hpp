#ifndef CORETRY_CORETRY_HPP
#define CORETRY_CORETRY_HPP

/// Umbrella header: the retry engine and its parts.
#include <coretry/async_retry.hpp>
#include <coretry/attempt.hpp>
#include <coretry/attempt_record.hpp>
#include <coretry/budget.hpp>
#include <coretry/classify.hpp>
#include <coretry/decision_core.hpp>
#include <coretry/gate.hpp>
#include <coretry/latency_tracker.hpp>
#include <coretry/observer.hpp>
#include <coretry/outcome.hpp>
#include <coretry/policy.hpp>
#include <coretry/random.hpp>
#include <coretry/stop_reason.hpp>
#include <coretry/verdict.hpp>
#include <coretry/wait_source.hpp>

#endif
