// SPDX-License-Identifier: Apache-2.0
// Credentials and ACLs on the command line: --auth SCHEME:CREDENTIALS (repeatable), --auth-file
// FILE (one per line; refused unless only its owner may read or write it, as ssh does with private
// keys), $ZKLOCK_AUTH (one per line) when neither is given, and exec's --acl SPEC in zkCli's
// scheme:id:perms syntax. No message repeats a credential: it could end up in a log.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include "cli.hpp"

namespace zkcli {
namespace {

constexpr std::size_t max_auth_file = 64 * 1024;  // the library refuses more credentials anyway

/// Returns: a credential with this `line` of `source`, or nothing for a blank or '#' comment line.
/// Throws: exit_error (usage) naming `source`, never the line.
std::optional<zklock::auth_info> auth_line(const std::string& source, std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (line.empty() || line.front() == '#') return std::nullopt;
  return parse_auth(source, line);
}

/// Effects: adds the credentials of `text`, one per line (blank and '#' lines skipped), to `o`.
/// Returns: how many. Throws: exit_error (usage) naming `source` and the line number.
std::size_t add_auth_lines(options& o, const std::string& source, std::string_view text) {
  std::size_t added = 0, number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (auto a = auth_line(source + " line " + std::to_string(++number), line)) {
      o.auth.push_back(std::move(*a));
      ++added;
    }
  }
  return added;
}

/// Returns: the text of the secrets file `path`, given as `option`. Throws: exit_error (usage) if
/// it cannot be read, is not a regular file, group or others may access it, or it is over 64 KiB.
std::string read_private_file(const std::string& option, const std::string& path) {
  const std::string what = option + " \"" + path + "\"";
  fd_t fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};  // (a FIFO must not block)
  if (fd.get() < 0) usage_error("cannot read " + what + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) usage_error("cannot read " + what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) usage_error(what + " is not a regular file");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    usage_error(what + " holds secrets but group or others may access it (mode " + mode +
                "): make it private with chmod 600");
  }
  if (static_cast<std::size_t>(st.st_size) > max_auth_file) usage_error(what + " is over 64 KiB");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) usage_error("cannot read " + what + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

/// Returns: the first line of the secrets file `path`, given as `option` (a passphrase, a password).
/// Throws: exit_error (usage) as read_private_file, or if that line is empty.
std::string first_line_secret(const std::string& option, const std::string& path) {
  std::string text = read_private_file(option, path);
  text.resize(std::min(text.size(), text.find('\n')));
  if (text.ends_with('\r')) text.pop_back();
  if (text.empty()) usage_error(option + " \"" + path + "\" holds no secret on its first line");
  return text;
}

/// Effects: adds the credentials of the file `path` to `o` (--auth-file). Throws: exit_error
/// (usage) as read_private_file, or if a line is not SCHEME:CREDENTIALS, or none is.
void add_auth_file(options& o, const std::string& path) {
  const std::string text = read_private_file("--auth-file", path);
  const std::string what = "--auth-file \"" + path + "\"";
  if (add_auth_lines(o, what, text) == 0) usage_error(what + " holds no SCHEME:CREDENTIALS line");
}

/// Returns: the perm:: bits of zkCli's letters `text` ("cdrwa", in any order). Throws: exit_error (usage).
int parse_perms(std::string_view text, const std::string& entry) {
  int perms = 0;
  for (char c : text) {
    switch (c) {
      case 'r': perms |= zklock::perm::read; break;
      case 'w': perms |= zklock::perm::write; break;
      case 'c': perms |= zklock::perm::create; break;
      case 'd': perms |= zklock::perm::remove; break;
      case 'a': perms |= zklock::perm::admin; break;
      default: usage_error("bad --acl entry \"" + entry + "\": unknown permission '" + std::string(1, c) + "' (use r, w, c, d, a)");
    }
  }
  if (perms == 0) usage_error("bad --acl entry \"" + entry + "\": no permissions (give some of r, w, c, d, a)");
  return perms;
}

}  // namespace

zklock::auth_info parse_auth(std::string_view source, std::string_view text) {
  const auto colon = text.find(':');
  if (colon == 0 || colon == std::string_view::npos)
    usage_error("bad " + std::string{source} + ": expected SCHEME:CREDENTIALS, e.g. digest:user:password");
  zklock::auth_info a{std::string{text.substr(0, colon)}, std::string{text.substr(colon + 1)}};
  if (a.scheme == "digest" && a.credential.find(':') == std::string::npos)
    usage_error("bad " + std::string{source} + ": digest credentials are digest:user:password");
  return a;
}

std::vector<zklock::acl_entry> parse_acl(std::string_view spec) {
  std::vector<zklock::acl_entry> acl;
  for (;;) {
    const auto comma = spec.find(',');
    const std::string entry{spec.substr(0, comma)};
    const auto first = entry.find(':'), last = entry.rfind(':');
    if (first == 0 || first == std::string::npos || first == last)
      usage_error("bad --acl entry \"" + entry + "\": expected SCHEME:ID:PERMS, e.g. world:anyone:r");
    acl.push_back({parse_perms(std::string_view{entry}.substr(last + 1), entry), entry.substr(0, first),
                   entry.substr(first + 1, last - first - 1)});
    if (comma == std::string_view::npos) return acl;
    spec.remove_prefix(comma + 1);
  }
}

std::vector<option_spec> auth_options(options& o) {
  return {
      {"--auth", "SCHEME:CRED",
       "credentials to authenticate with, e.g. digest:user:password (repeatable; visible to other users in the "
       "process list: prefer --auth-file or $ZKLOCK_AUTH)",
       [&o](const std::string& v) {
         o.auth.push_back(parse_auth("--auth", v));
         o.auth_given = true;
       }},
      {"--auth-file", "FILE",
       "read credentials from FILE, one SCHEME:CREDENTIALS per line ('#' lines skipped); FILE must be private to "
       "its owner (chmod 600) (repeatable)",
       [&o](const std::string& v) {
         add_auth_file(o, v);
         o.auth_given = true;
       }},
  };
}

std::vector<option_spec> tls_options(options& o) {
  return {
      {"--tls-ca", "FILE", "connect with TLS, trusting the servers' certificates that FILE's CAs signed (PEM)",
       [&o](const std::string& v) { o.tls.ca_file = v; }},
      {"--tls-cert", "FILE", "with TLS, this client's certificate (PEM; the servers may demand it)",
       [&o](const std::string& v) { o.tls.cert_file = v; }},
      {"--tls-key", "FILE", "with TLS, this client's private key (PEM)", [&o](const std::string& v) { o.tls.key_file = v; }},
      {"--tls-key-password-file", "FILE",
       "the passphrase of an encrypted --tls-key, on FILE's first line; FILE must be private to its owner "
       "(default: $ZKLOCK_TLS_KEY_PASSWORD)",
       [&o](const std::string& v) { o.tls.key_password = first_line_secret("--tls-key-password-file", v); }},
  };
}

std::optional<zklock::tls_options> tls_from_options(const options& o) {
  const auto& t = o.tls;
  const int given = !t.ca_file.empty() + !t.cert_file.empty() + !t.key_file.empty();
  if (given == 0) {
    if (!t.key_password.empty()) usage_error("--tls-key-password-file without --tls-ca, --tls-cert and --tls-key");
    return std::nullopt;
  }
  if (given != 3)
    usage_error("--tls-ca, --tls-cert and --tls-key go together (the ZooKeeper C client always presents a "
                "certificate of its own)");
  zklock::tls_options out = t;
  if (out.key_password.empty())
    if (const char* env = std::getenv("ZKLOCK_TLS_KEY_PASSWORD")) out.key_password = env;
  return out;
}

std::vector<option_spec> sasl_options(options& o) {
  return {
      {"--sasl-mechanism", "MECH", "authenticate with SASL, mechanism MECH (e.g. DIGEST-MD5, GSSAPI)",
       [&o](const std::string& v) {
         o.sasl.mechanism = v;
         o.sasl_given = true;
       }},
      {"--sasl-user", "USER", "the SASL user (implies --sasl-mechanism DIGEST-MD5 unless given)",
       [&o](const std::string& v) {
         o.sasl.user = v;
         o.sasl_given = true;
       }},
      {"--sasl-password-file", "FILE",
       "the SASL password, FILE's first line; FILE must be private to its owner (default: $ZKLOCK_SASL_PASSWORD)",
       [&o](const std::string& v) { o.sasl.password = first_line_secret("--sasl-password-file", v); }},
      {"--sasl-service", "NAME", "the servers' SASL service name (default zookeeper)",
       [&o](const std::string& v) { o.sasl.service = v; }},
      {"--sasl-host", "NAME", "the server name SASL authenticates (default zk-sasl-md5, DIGEST-MD5's)",
       [&o](const std::string& v) { o.sasl.host = v; }},
      {"--sasl-realm", "REALM", "the SASL realm, if the mechanism asks for one", [&o](const std::string& v) { o.sasl.realm = v; }},
  };
}

std::optional<zklock::sasl_options> sasl_from_options(const options& o) {
  if (!o.sasl_given) {
    if (!o.sasl.password.empty()) usage_error("--sasl-password-file without --sasl-user or --sasl-mechanism");
    return std::nullopt;
  }
  zklock::sasl_options out = o.sasl;
  if (out.password.empty())
    if (const char* env = std::getenv("ZKLOCK_SASL_PASSWORD")) out.password = env;
  if (out.mechanism == "DIGEST-MD5" && (out.user.empty() || out.password.empty()))
    usage_error("SASL DIGEST-MD5 needs --sasl-user and a password (--sasl-password-file or $ZKLOCK_SASL_PASSWORD)");
  return out;
}

option_spec acl_option(options& o) {
  return {"--acl", "SPEC",
          "the ACL of the nodes exec creates, in zkCli's syntax: SCHEME:ID:PERMS[,...], PERMS of r w c d a, e.g. "
          "auth::cdrwa,world:anyone:r (repeatable, adds entries; default: with credentials, the creator may do "
          "everything and others read; without, open)",
          [&o](const std::string& v) {
            auto more = parse_acl(v);
            o.acl.insert(o.acl.end(), more.begin(), more.end());
          }};
}

std::string identities(const std::vector<zklock::auth_info>& auth) {
  std::string out;
  for (const auto& a : auth) {
    if (!out.empty()) out += ", ";
    out += a.scheme;
    if (a.scheme == "digest") out += " user " + a.credential.substr(0, a.credential.find(':'));
  }
  return out;
}

void auth_from_environment(options& o) {
  if (o.auth_given) return;
  const char* env = std::getenv("ZKLOCK_AUTH");
  if (env) add_auth_lines(o, "ZKLOCK_AUTH", env);
}

}  // namespace zkcli
