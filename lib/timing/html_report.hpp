// The timing report as one self-contained HTML page: inline SVG charts drawn here, inline styles, no scripts, nothing
// fetched from anywhere, and the JSON document embedded so that `canopy report` reads the page back.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "timing/report.hpp"

namespace canopy::timing {

// Text made safe as HTML content or a quoted attribute value: & < > " ' become character references.
std::string html_escape(std::string_view text);

// The document as JSON text that cannot end the <script> element holding it: every < > & is written as a \uXXXX
// escape (they only occur inside strings); bytes that are not UTF-8 become U+FFFD.
std::string script_json(const nlohmann::json& document);

// One run: header, start-up waterfall, unattributed time, each phase's spread, and the slowest of each phase.
std::string format_html_report(const JobTiming& timing, std::string_view origin);

// Two runs: their medians and tails side by side, the phase that changed most flagged, then each run in full.
std::string format_html_comparison(const JobTiming& before, const JobTiming& after, std::string_view before_name,
                                   std::string_view after_name);

// The timing JSON embedded in a page written by format_html_report (the first run of a comparison), or nothing
// when the text holds none.
std::optional<std::string> embedded_timing_json(std::string_view html);

} // namespace canopy::timing
