#ifndef CORETRY_REDIS_CREDENTIALS_HPP
#define CORETRY_REDIS_CREDENTIALS_HPP
/// @file
/// AUTH's user name and password from outside the command line: the
/// environment, or a file.

#include <coretry/redis/url.hpp>

#include <optional>
#include <string>

namespace coretry::redis {

/// AUTH's user name (Redis 6 ACLs; none: the default user) and password
/// (empty: no AUTH). Never printed.
struct credentials {
  std::optional<std::string> user;
  std::string password;
};

/// The credentials given outside the URL: the user name from
/// CORETRY_REDIS_USERNAME, the password from the file `password_file` when
/// it is not empty (its content, one trailing newline removed), else from
/// CORETRY_REDIS_PASSWORD. Nothing set (or set empty): empty credentials. Throws
/// std::invalid_argument naming the variable or file, never its content: a
/// user name without a password, a file that cannot be read or is larger
/// than 4 KiB, and what credentials_problem refuses.
credentials read_credentials(const std::string& password_file = {});

/// Puts `given` into `at` unless its URL had a password (a URL's USER:PASSWORD
/// is used whole); a URL's USER@ (no password) keeps its user and takes the
/// password.
void use_credentials(endpoint& at, const credentials& given);

} // namespace coretry::redis

#endif
