// SPDX-License-Identifier: Apache-2.0
// Test and bench support: ZooKeeper's four-letter words ("srvr", "mntr", "cons", "wchp") and other
// one-shot TCP exchanges (a proxy's control port), without a ZooKeeper client; and the small text
// helpers the benchmark tools share (split, flag pairs).
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zkt {

/// Returns: `s` cut at every `sep`, empty pieces left out.
std::vector<std::string> split(std::string_view s, char sep);

/// Returns: a tool's arguments argv[1..] as (flag, value) pairs ("--n 20" -> {"--n", "20"}).
/// Throws: std::invalid_argument "FLAG: missing value" if the last flag has no value.
std::vector<std::pair<std::string, std::string>> flag_pairs(int argc, char** argv);

/// Returns: a connected TCP socket to host:port whose reads and writes time out after `timeout`,
/// or -1 (the caller closes it).
int dial(const std::string& host, const std::string& port, std::chrono::milliseconds timeout);

/// Effects: sends `request` to host:port. Returns: everything the peer answers before it closes (or,
/// with `one_line`, up to the first newline, without it); "" if it cannot connect.
std::string tcp_exchange(const std::string& host, const std::string& port, std::string_view request, bool one_line,
                         std::chrono::milliseconds timeout = std::chrono::seconds{5});

/// Returns: the first server of a connect string ("h1:p1,h2:p2/chroot") as host and port.
std::pair<std::string, std::string> first_server(const std::string& connect);

/// Returns: the answer of a four-letter word from the first server of `connect` ("" if none).
std::string four_letter_to(const std::string& connect, std::string_view word);

/// Returns: the answer of a four-letter word from the server on 127.0.0.1:`port` ("" if none).
std::string four_letter(int port, std::string_view word);

/// The numeric lines of a "mntr" answer, by key.
using mntr_values = std::map<std::string, double>;

/// Returns: the first server's "mntr" numbers (empty if it does not answer, e.g. not whitelisted).
mntr_values mntr(const std::string& connect);

}  // namespace zkt
