// The Markdown summary: a status line, one table row per variant with its rate and interval, a
// section for each variant that did not meet its expectation (signatures, repro), the notes;
// recorded text cannot break the table or escape its code span.
#include "reports/markdown.h"

#include <gtest/gtest.h>

#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

using harness::outcome;
using testing::operator+;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

// The cells of a table row, split on unescaped pipes.
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size()) {
      cur += row[i];
      cur += row[++i];
    } else if (row[i] == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  out.push_back(cur);
  return out;
}

TEST(markdown_code, fences_backticks_and_escapes_pipes) {
  EXPECT_EQ(markdown_code("SIGSEGV: f | main"), "`SIGSEGV: f \\| main`");
  EXPECT_EQ(markdown_code("a `b` c"), "``a `b` c``");
  EXPECT_EQ(markdown_code("`x`"), "`` `x` ``");
  EXPECT_EQ(markdown_code("line1\nline2"), "`line1 line2`");
  EXPECT_EQ(markdown_code(""), "(empty)");
}

TEST(to_markdown, has_a_row_per_variant_and_a_section_per_failure) {
  testing::temp_dir dir;
  auto failing = testing::runs("exit/a", 100, 3, outcome::crash, "SIGSEGV: pool::~pool | main `x`", 0, 1);
  auto passing = testing::runs("exit/b", 50, 0, outcome::pass, "", 200, 1);
  auto detected = testing::runs("exit/b@bug/y", 20, 20, outcome::fail, "invariant y", 300, 1, "bug/y=print");
  testing::write_results(dir.path(), failing + passing + detected, "{\"torn");
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string md = to_markdown(*m);
  const auto lines = lines_of(md);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "## faultline: ❌ 1 of 3 variants did not meet their expectation");

  std::vector<std::vector<std::string>> rows;
  for (const auto& l : lines)
    if (l.rfind("| ", 0) == 0 && l.find("`exit/") != std::string::npos && l.find("| runs | outcome") == std::string::npos &&
        cells(l).size() == 9)
      rows.push_back(cells(l));
  ASSERT_EQ(rows.size(), 3u) << md;
  // | status | variant | runs | failed | rate | outcomes | signature |
  EXPECT_EQ(rows[0][1], " ❌ ");
  EXPECT_EQ(rows[0][2], " `exit/a` ");
  EXPECT_EQ(rows[0][3], " 100 ");
  EXPECT_EQ(rows[0][4], " 3 ");
  EXPECT_EQ(rows[0][5], " 3.0% (1.0%–8.5%) ");
  EXPECT_EQ(rows[0][6], " pass 97, crash 3 ");
  EXPECT_EQ(rows[0][7], " crash/exit `` SIGSEGV: pool::~pool \\| main `x` `` ");
  EXPECT_EQ(rows[1][1], " ✅ ");
  EXPECT_EQ(rows[1][5], " 0% (0%–5.8%) ");
  EXPECT_EQ(rows[2][4], " 20 detected ");
  EXPECT_EQ(rows[2][5], " 100% (83.9%–100%) ");

  EXPECT_NE(md.find("### ❌ `exit/a`: 3 of 100 runs failed (3.0%, 95% CI 1.0%-8.5%)"), std::string::npos) << md;
  EXPECT_NE(md.find("Replay the first failure:\n\n```sh\nfaultline run exit/a --seed 1000 --repeat 1\n```\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("### ✅"), std::string::npos) << "no section for variants that met their expectation";
  EXPECT_NE(md.find("### Notes"), std::string::npos);
  EXPECT_NE(md.find("its last line is torn"), std::string::npos);
}

TEST(to_markdown, a_signature_points_to_its_stacks_and_shows_its_top_frames) {
  testing::temp_dir dir;
  auto runs = testing::runs("exit/a", 10, 2, outcome::crash, "SIGSEGV: pool::release | main");
  for (std::size_t k = 0; k < 2; ++k) {
    runs[k].stacks = "runs/" + runs[k].run_id + "/crash-stacks.txt";
    runs[k].frames = {"pool::release  (prog)", "main  (prog)"};
  }
  testing::write_results(dir.path(), runs);
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string md = to_markdown(*m);
  const std::string stacks = (dir.path() / "runs/exit-a.s1000/crash-stacks.txt").string();
  EXPECT_NE(md.find("| `" + stacks + "` |"), std::string::npos) << md;
  EXPECT_NE(md.find("Top frames of `exit-a.s1000` (`SIGSEGV: pool::release | main`):\n\n```\n#0  pool::release  (prog)\n"
                    "#1  main  (prog)\n```\n"),
            std::string::npos)
      << md;
}

TEST(to_markdown, all_good_says_so) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::runs("exit/a", 10));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m);
  const std::string md = to_markdown(*m);
  EXPECT_EQ(md.rfind("## faultline: ✅ the variant met its expectation\n", 0), 0u) << md;
  EXPECT_EQ(md.find("###"), std::string::npos) << md;
}

TEST(to_markdown, a_distributed_hang_has_a_table_of_its_ranks) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::distributed_hang("ddp/allreduce", 3));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string md = to_markdown(*m);
  EXPECT_NE(md.find("\nRanks of `ddp-allreduce.s1000`: ranks: 1 outside: 2 collectives, last ncclAllReduce, stopped by "
                    "nccl/ncclAllReduce before call \\#3; 0 in ncclAllReduce \\#3 (waiting)\n\n"
                    "| rank | pid | state | collectives | last collective | in call | fault | signal |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0 | 4100 | in-collective | 3 | ncclAllReduce | ncclAllReduce |  |  |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 4101 | outside | 2 | ncclAllReduce |  | stopped by nccl/ncclAllReduce \\#3 | SIGSTOP |\n"), std::string::npos)
      << md;
}

TEST(to_markdown, a_run_without_ranks_has_no_rank_table) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::runs("exit/a", 4, 1, outcome::hang, "hang: futex_wait"));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(to_markdown(*m).find("Ranks of"), std::string::npos);
}

}  // namespace
}  // namespace faultline::reports
