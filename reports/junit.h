// JUnit XML for CI systems (Jenkins' junit plugin, GitLab's test reports): the results as tests.
//
//   std::string xml = reports::to_junit(model);
//
// Shape: a <testsuites> root; for each variant, a <testsuite> holding its <properties> and one
// <testcase> named after it (classname "faultline.FAMILY", FAMILY being the part of a scenario's
// name before its '/', or "faultline" for a command). The properties are those Jenkins shows
// per suite: expectation, faults, runs, failures, failure_rate, failure_rate_lower95,
// failure_rate_upper95 (for a detection check also detections and detection_rate with its
// bounds), the count of every outcome ("outcome.crash"), duration quantiles and the repro
// command line. A variant that did not meet its expectation gets a <failure> (type: the outcome
// of its most frequent signature, or "undetected") whose message is the verdict and the top
// signature with its outcome and phase, and whose text lists every signature, the first run and
// log of each, and the repro line; a variant whose only problem is runs the harness could not
// perform gets an <error> instead. A testcase's time is the sum of its runs' durations.
//
// Every text and attribute is escaped (detail::printable first: control characters and bytes
// that are not UTF-8 become visible escapes, never characters XML 1.0 forbids), so any crash
// text a program printed yields a well-formed document. reports/testdata/junit.xsd is the
// schema the tests check the output against.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "reports/report_model.h"

namespace faultline::reports {

/// `text` as XML 1.0 character data: printable(), then & < > escaped and CR as &#13; (so that
/// a parser's line-end normalisation gives it back).
std::string xml_text(std::string_view text);

/// `text` as an XML 1.0 attribute value (in double quotes): as xml_text, and " ' tab, LF
/// escaped as character references (attribute-value normalisation would turn them into spaces).
std::string xml_attribute(std::string_view text);

/// The JUnit XML document of `m` (UTF-8, with an XML declaration, ending in a newline).
std::string to_junit(const report_model& m);

}  // namespace faultline::reports
