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
/// CORETRY_REDIS_PASSWORD. Nothing set (or set empty): empty credentials; a
/// user name alone is returned as it is (use_credentials() decides whether
/// the URL gives it a password). Throws std::invalid_argument naming the
/// variable or file, never its content: a file that cannot be read or is
/// larger than 4 KiB, and a password that credentials_problem refuses.
credentials read_credentials(const std::string& password_file = {});

/// The one rule for AUTH's credentials, which shared_state applies to its
/// server too: completes `at` (what parse_url() read) with `given` (from
/// outside the URL, read_credentials()):
/// - a URL with a password (`USER:PASSWORD@`, or `:PASSWORD@` for the
///   default user) is used whole: its password wins over `given`'s, and its
///   user (or none) over `given`'s;
/// - else `given`'s password, with the URL's user (`USER@`) or else
///   `given`'s;
/// - no password from either: no AUTH, unless a user is named.
/// Throws std::invalid_argument, leaving `at` as it was, for a user with no
/// password from anywhere (naming where the user came from and where a
/// password may) and for what credentials_problem refuses; the message
/// never holds the password.
void use_credentials(endpoint& at, const credentials& given);

} // namespace coretry::redis

#endif
