// JUnit XML: the document validates against the schema CI systems read (reports/testdata/
// junit.xsd, checked with xmllint when it is installed), whatever bytes a crash signature holds;
// a failing variant's <failure> carries outcome, phase, signature and repro; properties carry
// runs, failure rate and its bounds; a detection check that detected its bug passes.
#include "reports/junit.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "reports/tests/fixtures.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using testing::operator+;

// Runs xmllint --schema over `xml`; "" when it validates, else what xmllint said.
std::string schema_errors(const std::string& xml, const fs::path& dir) {
  const fs::path file = dir / "junit.xml", log = dir / "xmllint.log";
  std::ofstream(file, std::ios::binary) << xml;
  const std::string cmd = "xmllint --noout --schema '" + std::string(FAULTLINE_JUNIT_XSD) + "' '" + file.string() + "' >'" +
                          log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return status == 0 ? "" : "xmllint: " + testing::read_text(log);
}

bool have_xmllint() { return std::system("command -v xmllint >/dev/null 2>&1") == 0; }

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// What a nasty crash printed: markup, quotes, an entity, the end of a CDATA section, a NUL,
// terminal colours, CR LF, a tab and a non-character. (Bytes that are not UTF-8 cannot be in a
// results file, whose lines are JSON; xml_escape's test covers them.)
const std::string nasty =
    std::string("SIGSEGV: a<b>&amp;\"q\" 'x' ]]> </failure>") + std::string(1, '\0') + "\x1b[31m\x7f end\r\n\tnext \xef\xbf\xbe";

report_model nasty_model(const fs::path& dir) {
  auto bad = testing::runs("exit/a", 40, 3, outcome::crash, nasty);
  bad[3].result = outcome::hang;
  bad[3].when = harness::phase::run;
  bad[3].signature = "futex_wait | join";
  auto detected = testing::runs("exit/a@bug/x", 10, 10, outcome::fail, "invariant <x>", 100, 1, "bug/x=print");
  auto errors = testing::runs("cmd \"quoted\"", 5, 1, outcome::error, "cannot exec", 200);
  testing::write_results(dir, bad + detected + errors + testing::runs("exit/clean", 7, 0, outcome::pass, "", 300));
  auto m = load_report({dir});
  EXPECT_TRUE(m) << m.error().message();
  return *m;
}

TEST(xml_escape, escapes_markup_and_controls) {
  EXPECT_EQ(xml_text("a<b>&c \"q\" 'x'"), "a&lt;b&gt;&amp;c \"q\" 'x'");
  EXPECT_EQ(xml_attribute("a<b>&c \"q\" 'x'"), "a&lt;b&gt;&amp;c &quot;q&quot; &apos;x&apos;");
  EXPECT_EQ(xml_text("]]>"), "]]&gt;");
  EXPECT_EQ(xml_text("l1\r\nl2\tx"), "l1&#13;\nl2\tx");
  EXPECT_EQ(xml_attribute("l1\r\nl2\tx"), "l1&#13;&#10;l2&#9;x");
  EXPECT_EQ(xml_text(std::string("\0\x01\xff", 3)), "\\x00\\x01\\xff");
}

TEST(to_junit, validates_against_the_schema_whatever_the_signature) {
  testing::temp_dir dir;
  const std::string xml = to_junit(nasty_model(dir.path()));
  // No raw control character (other than tab, LF) and no unescaped markup from the signature.
  for (char c : xml) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') << int(c);
  EXPECT_EQ(xml.find("</failure>\\x00"), std::string::npos);
  EXPECT_NE(xml.find("&lt;/failure&gt;\\x00\\x1b[31m\\x7f end&#13;\n\tnext \\u{FFFE}"), std::string::npos) << xml;
  if (!have_xmllint()) GTEST_SKIP() << "xmllint not installed (Debian: libxml2-utils): the schema check did not run";
  EXPECT_EQ(schema_errors(xml, dir.path()), "");
}

TEST(to_junit, the_schema_check_can_fail) {
  if (!have_xmllint()) GTEST_SKIP() << "xmllint not installed (Debian: libxml2-utils)";
  testing::temp_dir dir;
  // What a careless writer would produce: a raw control character, a testcase without a name,
  // a testsuite as the root.
  EXPECT_NE(schema_errors("<?xml version=\"1.0\"?>\n<testsuites><testsuite name=\"s\" tests=\"1\"><testcase name=\"a\x01\"/></testsuite></testsuites>\n", dir.path()), "");
  EXPECT_NE(schema_errors("<?xml version=\"1.0\"?>\n<testsuites><testsuite name=\"s\" tests=\"1\"><testcase/></testsuite></testsuites>\n", dir.path()), "");
  EXPECT_NE(schema_errors("<?xml version=\"1.0\"?>\n<testsuite name=\"s\" tests=\"1\"/>\n", dir.path()), "");
  EXPECT_NE(schema_errors("<?xml version=\"1.0\"?>\n<testsuites tests=\"-1\"/>\n", dir.path()), "");
}

TEST(to_junit, one_case_per_variant_with_failures_where_expected) {
  testing::temp_dir dir;
  const std::string xml = to_junit(nasty_model(dir.path()));
  EXPECT_NE(xml.find("<testsuites name=\"faultline\" tests=\"4\" failures=\"1\" errors=\"1\""), std::string::npos) << xml;
  EXPECT_EQ(count(xml, "<testcase "), 4u);
  EXPECT_EQ(count(xml, "<failure "), 1u);
  EXPECT_EQ(count(xml, "<error "), 1u);
  EXPECT_NE(xml.find("<testcase name=\"exit/a@bug/x\" classname=\"faultline.exit\" time=\"0.230\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase name=\"exit/clean\" classname=\"faultline.exit\""), std::string::npos);
  EXPECT_NE(xml.find("<testcase name=\"cmd &quot;quoted&quot;\" classname=\"faultline\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error type=\"error\" message=\"1 of 5 runs failed"), std::string::npos) << xml;
}

TEST(to_junit, a_failure_carries_outcome_phase_signature_and_repro) {
  testing::temp_dir dir;
  const std::string xml = to_junit(nasty_model(dir.path()));
  const auto at = xml.find("<failure ");
  ASSERT_NE(at, std::string::npos);
  const std::string failure = xml.substr(at, xml.find("</failure>", at) - at);
  EXPECT_NE(failure.find("type=\"crash\""), std::string::npos) << failure;
  EXPECT_NE(failure.find("message=\"4 of 40 runs failed (10.0%, 95% CI 4.0%-23.1%); most frequent: 3x crash/exit SIGSEGV: a&lt;b&gt;"),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.find("3x crash/exit  SIGSEGV: a&lt;b&gt;&amp;amp;"), std::string::npos) << failure;
  EXPECT_NE(failure.find("1x hang/run  futex_wait | join"), std::string::npos) << failure;
  EXPECT_NE(failure.find("first run exit-a.s1000, log " + (dir.path() / "logs/exit-a.s1000.log").string()), std::string::npos) << failure;
  EXPECT_NE(failure.find("repro: faultline run exit/a --seed 1000 --repeat 1"), std::string::npos) << failure;
}

TEST(to_junit, a_failure_names_the_stacks_and_top_frames_of_each_signature) {
  testing::temp_dir dir;
  auto runs = testing::runs("exit/a", 10, 1, outcome::hang, "hang: worker_step");
  runs[0].stacks = "runs/" + runs[0].run_id + "/stacks.txt";
  runs[0].frames = {"sem_wait  (libc.so.6)", "worker_step  (prog)"};
  testing::write_results(dir.path(), runs);
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string xml = to_junit(*m);
  EXPECT_NE(xml.find(", stacks " + (dir.path() / "runs/exit-a.s1000/stacks.txt").string() + "\n"), std::string::npos) << xml;
  EXPECT_NE(xml.find("       #0  sem_wait  (libc.so.6)\n       #1  worker_step  (prog)\n"), std::string::npos) << xml;
}

TEST(to_junit, properties_carry_runs_rate_and_bounds) {
  testing::temp_dir dir;
  const std::string xml = to_junit(nasty_model(dir.path()));
  const auto at = xml.find("<testsuite name=\"exit/a\"");
  ASSERT_NE(at, std::string::npos);
  const std::string suite = xml.substr(at, xml.find("</testsuite>", at) - at);
  for (const char* p : {"<property name=\"runs\" value=\"40\"/>", "<property name=\"failures\" value=\"4\"/>",
                        "<property name=\"failure_rate\" value=\"0.1\"/>", "<property name=\"failure_rate_lower95\" value=\"0.0395",
                        "<property name=\"failure_rate_upper95\" value=\"0.230", "<property name=\"outcome.crash\" value=\"3\"/>",
                        "<property name=\"outcome.hang\" value=\"1\"/>", "<property name=\"expectation\" value=\"no-failure\"/>",
                        "<property name=\"repro\" value=\"faultline run exit/a --seed 1000 --repeat 1\"/>"})
    EXPECT_NE(suite.find(p), std::string::npos) << p << "\n" << suite;
  const auto det = xml.find("<testsuite name=\"exit/a@bug/x\"");
  ASSERT_NE(det, std::string::npos);
  const std::string dsuite = xml.substr(det, xml.find("</testsuite>", det) - det);
  EXPECT_NE(dsuite.find("<property name=\"detection_rate\" value=\"1\"/>"), std::string::npos) << dsuite;
  EXPECT_NE(dsuite.find("<property name=\"expectation\" value=\"detection\"/>"), std::string::npos) << dsuite;
}

TEST(to_junit, an_undetected_bug_point_fails) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::runs("exit/a@bug/x", 10, 0, outcome::pass, "", 0, 1, "bug/x=print"));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m);
  const std::string xml = to_junit(*m);
  EXPECT_NE(xml.find("<failure type=\"undetected\" message=\"bug point never detected in 10 runs\">"), std::string::npos) << xml;
}

TEST(to_junit, a_distributed_hang_names_its_ranks_in_the_message_and_lists_them_in_the_body) {
  testing::temp_dir dir;
  testing::write_results(dir.path(), testing::distributed_hang("ddp/allreduce", 3));
  auto m = load_report({dir.path()});
  ASSERT_TRUE(m) << m.error().message();
  const std::string xml = to_junit(*m);
  EXPECT_NE(xml.find("message=\"1 of 3 runs failed"), std::string::npos) << xml;
  EXPECT_NE(xml.find("1x hang/exit hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it; "
                     "ranks: 1 outside: 2 collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before call #3; "
                     "0 in ncclAllReduce #3 (waiting)\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("     ranks of the first run:\n"
                     "       rank 0  pid 4100  in-collective  in ncclAllReduce #3 (waiting)\n"
                     "       rank 1  pid 4101  outside  outside: 2 collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before call #3\n"),
            std::string::npos)
      << xml;
  if (have_xmllint()) {
    EXPECT_EQ(schema_errors(xml, dir.path()), "");
  }
}

}  // namespace
}  // namespace faultline::reports
