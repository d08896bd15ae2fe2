#include "harness/detail/proc.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "harness/detail/sys.h"

namespace faultline::harness::detail {
namespace {

std::vector<pid_t> numeric_entries(const char* dir) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(dir);
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  ::closedir(d);
  return out;
}

}  // namespace

std::optional<proc_stat> parse_stat(const std::string& text) {
  // "pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  //  cutime cstime priority nice threads itrealvalue starttime ..." — comm is whatever the
  // program chose, so find its closing parenthesis from the right.
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  proc_stat s;
  s.pid = static_cast<pid_t>(std::strtol(text.c_str(), nullptr, 10));
  s.comm = text.substr(open + 1, close - open - 1);
  const char* p = text.c_str() + close + 1;
  std::vector<std::uint64_t> fields;  // from field 4 (ppid) on
  while (*p == ' ') ++p;
  if (!*p) return std::nullopt;
  s.state = *p++;
  while (*p && fields.size() < 19) {
    while (*p == ' ') ++p;
    if (!*p) break;
    char* end = nullptr;
    long long v = std::strtoll(p, &end, 10);
    if (end == p) return std::nullopt;
    fields.push_back(static_cast<std::uint64_t>(v));
    p = end;
  }
  if (fields.size() < 19) return std::nullopt;
  s.ppid = static_cast<pid_t>(fields[0]);
  s.pgrp = static_cast<pid_t>(fields[1]);
  s.session = static_cast<pid_t>(fields[2]);
  s.start_time = fields[18];  // field 22
  return s;
}

std::optional<proc_stat> read_stat(pid_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return std::nullopt;
  return parse_stat(*text);
}

std::vector<proc_stat> snapshot() {
  std::vector<proc_stat> out;
  for (pid_t pid : numeric_entries("/proc")) {
    if (auto s = read_stat(pid)) out.push_back(std::move(*s));
  }
  return out;
}

std::optional<std::vector<pid_t>> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string base = "/proc/" + std::to_string(pid) + "/task/";
  for (pid_t tid : threads_of(pid)) {
    auto text = read_file(base + std::to_string(tid) + "/children", 1 << 20);
    if (!text) {
      if (text.code() == core::errc::not_found && ::access((base + std::to_string(tid)).c_str(), F_OK) == 0)
        return std::nullopt;  // the task exists but has no children file: not supported
      continue;             // the thread exited meanwhile
    }
    const char* p = text->c_str();
    for (;;) {
      char* end = nullptr;
      long v = std::strtol(p, &end, 10);
      if (end == p) break;
      out.push_back(static_cast<pid_t>(v));
      p = end;
    }
  }
  return out;  // empty too when the process is gone
}

std::vector<proc_stat> descendants(pid_t root) {
  std::vector<proc_stat> out;
  std::vector<pid_t> queue = {root};
  std::unordered_set<pid_t> seen = {root};  // children lists are read at different instants
  for (std::size_t i = 0; i < queue.size(); ++i) {
    auto kids = children_of(queue[i]);
    if (!kids) return snapshot();
    for (pid_t k : *kids) {
      if (!seen.insert(k).second) continue;
      auto s = read_stat(k);
      if (!s) continue;
      out.push_back(std::move(*s));
      queue.push_back(k);
    }
  }
  return out;
}

std::optional<std::string> read_environ_var(pid_t pid, const std::string& name) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/environ", 1 << 20);
  if (!text) return std::nullopt;
  const std::string prefix = name + "=";
  std::size_t pos = 0;
  while (pos < text->size()) {
    std::size_t end = text->find('\0', pos);
    if (end == std::string::npos) end = text->size();
    if (text->compare(pos, prefix.size(), prefix) == 0)
      return text->substr(pos + prefix.size(), end - pos - prefix.size());
    pos = end + 1;
  }
  return std::nullopt;
}

std::vector<pid_t> threads_of(pid_t pid) {
  return numeric_entries(("/proc/" + std::to_string(pid) + "/task").c_str());
}

}  // namespace faultline::harness::detail
