#ifndef CORETRY_HTTP_IDEMPOTENCY_HPP
#define CORETRY_HTTP_IDEMPOTENCY_HPP

#include <string>

namespace coretry::http {

/// A fresh Idempotency-Key value: a random (version 4) UUID in its
/// canonical text form, 36 characters. Used by
/// request_options::generate_idempotency_key; a program that shows or logs
/// the key before sending can make one here and pass it as
/// request_options::idempotency_key.
std::string new_idempotency_key();

} // namespace coretry::http

#endif
