#include "harness/campaign/state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "harness/detail/sys.h"

namespace faultline::harness {

namespace fs = std::filesystem;

core::result<bool> read_state_file(const fs::path& path, std::string_view what,
                                   const std::function<void(const nlohmann::json&)>& parse) {
  auto text = detail::read_file(path, 16 << 20);
  if (!text) {
    if (text.code() == core::errc::not_found) return false;
    return text.error();
  }
  try {
    auto j = nlohmann::json::parse(*text);
    if (j.at("format").get<int>() != state_file_format)
      throw nlohmann::json::other_error::create(501, "unknown format " + j.at("format").dump(), &j);
    parse(j);
  } catch (const nlohmann::json::exception& e) {
    return core::status(core::errc::corrupt, path.string() + " is not a faultline " + std::string(what) + ": " + e.what());
  }
  return true;
}

core::status write_state_file(const fs::path& path, nlohmann::json state) {
  state["format"] = state_file_format;
  const fs::path tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return detail::sys_error(errno, "open " + tmp.string());
  auto st = detail::write_all(fd, state.dump(2) + "\n", "write " + tmp.string());
  if (st && ::fsync(fd) != 0) st = detail::sys_error(errno, "fsync " + tmp.string());
  ::close(fd);
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0) st = detail::sys_error(errno, "rename " + tmp.string());
  if (!st) ::unlink(tmp.c_str());
  return st;
}

}  // namespace faultline::harness
