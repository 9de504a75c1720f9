#include <coretry/redis/credentials.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace coretry::redis {

namespace {

constexpr std::size_t max_file = 4096;

std::string read_password_file(const std::string& path) {
  const auto fail = [&](const std::string& why) {
    return std::invalid_argument("the Redis password file '" + path + "' " + why);
  };
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rbe"), std::fclose);
  if (!file) throw fail(std::string("cannot be read: ") + std::strerror(errno));
  std::string content(max_file + 1, '\0');
  const std::size_t got = std::fread(content.data(), 1, content.size(), file.get());
  if (std::ferror(file.get())) throw fail(std::string("cannot be read: ") + std::strerror(errno));
  if (got > max_file) throw fail("is larger than 4 KiB");
  content.resize(got);
  if (!content.empty() && content.back() == '\n') content.pop_back();
  if (!content.empty() && content.back() == '\r') content.pop_back();
  return content;
}

} // namespace

credentials read_credentials(const std::string& password_file) {
  credentials c;
  const char* user = std::getenv("CORETRY_REDIS_USERNAME");
  if (user && *user) c.user = user;
  std::string source;
  if (!password_file.empty()) {
    c.password = read_password_file(password_file);
    source = "the Redis password file '" + password_file + "'";
  } else if (const char* password = std::getenv("CORETRY_REDIS_PASSWORD"); password && *password) {
    c.password = password;
    source = "CORETRY_REDIS_PASSWORD";
  }
  if (source.empty()) return c; // a user alone, or nothing: use_credentials() decides
  if (auto why = credentials_problem(c.user.value_or(""), c.password))
    throw std::invalid_argument("the Redis credentials from " + source +
                                (c.user ? " and CORETRY_REDIS_USERNAME" : "") + ": " + *why);
  return c;
}

void use_credentials(endpoint& at, const credentials& given) {
  credentials used{at.user, at.password};
  if (used.password.empty()) {
    if (!given.password.empty()) {
      if (!used.user) used.user = given.user; // a user in the URL is the one meant
      used.password = given.password;
    } else if (used.user || given.user) {
      throw std::invalid_argument(std::string(used.user ? "the Redis user name in the URL" : "CORETRY_REDIS_USERNAME") +
                                  " needs a password (in the URL, CORETRY_REDIS_PASSWORD or a password file)");
    }
  }
  if (!used.password.empty())
    if (auto why = credentials_problem(used.user.value_or(""), used.password))
      throw std::invalid_argument("the Redis credentials: " + *why);
  at.user = std::move(used.user);
  at.password = std::move(used.password);
}

} // namespace coretry::redis
