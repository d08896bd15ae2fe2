// The JSON state files of an output directory: OUT/campaign.json (a campaign's manifest,
// campaign.h) and OUT/soak.json (a soak's state, soak.h). Each is one JSON object with
// "format": 1, read whole and replaced whole: a reader, or a resume after the harness was killed
// at any moment, sees the old file or the new one, never half of one.
//
//   auto found = harness::read_state_file(out / "soak.json", "soak state", [&](const nlohmann::json& j) {
//     seed = j.at("seed").get<std::uint64_t>();    // a missing or mistyped field throws: corrupt
//   });
//   if (!found) return found.error();               // *found: false when there is no such file
//   auto written = harness::write_state_file(out / "soak.json", {{"seed", seed}});
//
// Thread safety: plain functions; concurrent writers of one file are the caller's to serialize.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace faultline::harness {

/// The "format" of every state file this harness writes and reads.
inline constexpr int state_file_format = 1;

/// Reads the state file `path` and hands its JSON object to `parse`. Returns false when there is
/// no such file (parse is not called), true once parse has returned. Errors: corrupt, "PATH is not
/// a faultline WHAT: ...", when it is not JSON, its "format" is not state_file_format, or `parse`
/// throws a nlohmann::json exception (a field missing or of another type; parse may throw one of
/// its own for a value it refuses); io_error when it cannot be read (read_file's errors).
core::result<bool> read_state_file(const std::filesystem::path& path, std::string_view what,
                                   const std::function<void(const nlohmann::json&)>& parse);

/// Replaces `path` with `state` (an object; "format" is set to state_file_format): written to
/// PATH.tmp, synced and renamed over it; PATH.tmp is removed when that fails. Errors: io_error
/// naming the step that failed (a full disk: the old file is intact).
core::status write_state_file(const std::filesystem::path& path, nlohmann::json state);

}  // namespace faultline::harness
