// The HTML timing report: the page's layout, and its charts drawn as inline SVG (waterfall, spreads, comparison).
#include "timing/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "timing/analysis.hpp"

namespace canopy::timing {
namespace {

using nlohmann::json;

constexpr std::string_view embedded_open = R"(<script type="application/json" id="canopy-timing">)";
constexpr std::string_view embedded_close = "</script>";
// A report may hold 10^5 phases: past this many, the per-phase charts and lists stop, and say so.
constexpr std::size_t max_phase_figures = 200;

// Inline, like everything else: the page is one file that opens anywhere, offline.
constexpr std::string_view style = R"css(
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dce4}
h3{font-size:15px;margin:18px 0 6px}
code,.mono,td.num{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.meta{color:#4a5262;margin:2px 0}.command{background:#f3f5f8;padding:6px 8px;border-radius:4px;overflow-wrap:anywhere}
.failure{background:#fdecea;border-left:4px solid #c62828;padding:6px 10px}
.restart{background:#fff8e1;border-left:4px solid #f9a825;padding:6px 10px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.card{border:1px solid #d8dce4;border-radius:6px;padding:8px 14px;min-width:180px}
.card .big{font-size:24px;font-weight:600}.card .sub{color:#4a5262;font-size:12.5px}
.card.warn{border-color:#e6a23c;background:#fff8ec}
svg.chart{display:block;max-width:100%;height:auto;background:#fff}
svg text{font:11px ui-monospace,SFMono-Regular,Menlo,monospace;fill:#1d2330}
svg .axis{stroke:#e3e6ec}svg .axis-label{fill:#6b7385}
.step{fill:#8da0cb}.whisker{stroke:#5b6478;stroke-width:1.2}.tail{fill:#fc8d62}.median{stroke:#111;stroke-width:2}
.app-span{fill:#66c2a5;opacity:.75}.gap{fill:#e41a1c;opacity:.16}.end{stroke:#e41a1c;stroke-dasharray:4 3}
.bar{fill:#8da0cb}.cdf{fill:none;stroke:#d95f02;stroke-width:1.5}.mark{stroke:#111;stroke-dasharray:3 2}
.run-a{stroke:#1f77b4;fill:#1f77b4}.run-b{stroke:#ff7f0e;fill:#ff7f0e}.flagged{fill:#fff1c2}
.legend span{display:inline-block;margin-right:14px;font-size:12.5px}
.swatch{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
.swatch.step{background:#8da0cb}.swatch.app-span{background:#66c2a5}.swatch.tail{background:#fc8d62}
.swatch.gap{background:#f0a0a0}.swatch.run-a{background:#1f77b4}.swatch.run-b{background:#ff7f0e}
table{border-collapse:collapse;margin:6px 0}th,td{padding:2px 8px;text-align:left;border-bottom:1px solid #eceef2}
td.num,th.num{text-align:right}tr.flagged td{background:#fff1c2}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:14px}
figure{margin:0;border:1px solid #e3e6ec;border-radius:6px;padding:6px}
figcaption{font-size:12.5px;margin-bottom:4px;overflow-wrap:anywhere}
.note{color:#6b7385;font-size:12.5px}
)css";

// ---- SVG helpers: every number written is finite, and every length non-negative. ----

std::string px(double value)
{
    return fmt::format("{:.1f}", std::isfinite(value) ? value : 0.0);
}

std::string length(double value)
{
    return px(std::isfinite(value) ? std::max(0.0, value) : 0.0);
}

// Maps values in [lo, hi] to pixels in [left, right]; values outside are clamped.
struct Scale {
    double lo = 0, hi = 1, left = 0, right = 1;
    double operator()(double value) const
    {
        if (!(hi > lo) || !std::isfinite(value))
            return left;
        return left + (std::clamp(value, lo, hi) - lo) / (hi - lo) * (right - left);
    }
};

// Round values (1, 2 or 5 times a power of ten) from lo to hi, about `count` of them.
std::vector<double> ticks(double lo, double hi, int count)
{
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi))
        return {lo};
    const double raw = (hi - lo) / count;
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * power;
    for (double multiple : {1.0, 2.0, 5.0})
        if (multiple * power >= raw) {
            step = multiple * power;
            break;
        }
    std::vector<double> out;
    for (double tick = std::ceil(lo / step) * step; tick <= hi + step * 1e-9; tick += step)
        out.push_back(tick);
    return out;
}

std::string value_text(std::string_view phase, double value)
{
    return phase_kind(phase) == PhaseKind::count ? fmt::format("{:.0f}", value) : format_seconds(value);
}

// Vertical grid lines with their values under the chart, all in one unit: seconds from 10 s on, else ms.
void draw_axis(std::string& svg, const Scale& x, double top, double bottom)
{
    const bool seconds = x.hi >= 10;
    for (double tick : ticks(x.lo, x.hi, 8)) {
        const double at = x(tick);
        svg += fmt::format(R"(<line class="axis" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>)", px(at), px(top),
                           px(bottom));
        svg += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="middle">{:g} {}</text>)", px(at),
                           px(bottom + 14), seconds ? tick : tick * 1000, seconds ? "s" : "ms");
    }
}

std::string label_text(std::string_view name, std::size_t width)
{
    if (name.size() <= width)
        return html_escape(name);
    return html_escape(name.substr(0, width - 3)) + "...";
}

std::string quantiles_text(std::string_view name, const Sketch& sketch)
{
    return fmt::format("{}: {} values; min {}, median {}, p99 {}, max {} ({})", name, sketch.count(),
                       value_text(name, sketch.min()), value_text(name, sketch.median()),
                       value_text(name, sketch.quantile(0.99)), value_text(name, sketch.max()), sketch.max_who());
}

// A phase's distribution on one row: a whisker from min to max, a box from median to p99, a tick at the median.
void draw_distribution(std::string& svg, const Scale& x, double middle, double height, const Sketch& sketch,
                       std::string_view extra_class)
{
    svg += fmt::format(R"(<line class="whisker {0}" x1="{1}" x2="{2}" y1="{3}" y2="{3}"/>)", extra_class,
                       px(x(sketch.min())), px(x(sketch.max())), px(middle));
    svg += fmt::format(R"(<line class="whisker {0}" x1="{1}" x2="{2}" y1="{3}" y2="{4}"/>)", extra_class,
                       px(x(sketch.max())), px(x(sketch.max())), px(middle - height / 3), px(middle + height / 3));
    const double median = x(sketch.median()), p99 = x(sketch.quantile(0.99));
    svg += fmt::format(R"(<rect class="tail {}" x="{}" y="{}" width="{}" height="{}"/>)", extra_class, px(median),
                       px(middle - height / 4), length(std::max(p99 - median, 1.5)), length(height / 2));
    svg += fmt::format(R"(<line class="median" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>)", px(median),
                       px(middle - height / 2), px(middle + height / 2));
}

// ---- The waterfall: launcher steps, then the phases in the order they happened, up to the start-up's end. ----

std::string waterfall_svg(const JobTiming& timing, const StartupWindow& window, std::string_view id)
{
    struct Row {
        std::string name;
        const Sketch* sketch = nullptr;   // a phase, else a launcher step
        double begin = 0, end = 0;        // a step's, or an application phase's mean span
        bool span = false;
    };
    std::vector<Row> rows;
    double x_max = window.end;
    for (const auto& span : window.covered)
        if (!span.name.starts_with("app.")) {
            rows.push_back({span.name, nullptr, span.begin, span.end, true});
            x_max = std::max(x_max, span.end);
        }
    for (const auto* phase : ordered_phases(timing.phases)) {
        const auto& [name, sketch] = *phase;
        // Up to the end: what no rank had reached by then (the job's run, its exit) is not start-up.
        if (phase_kind(name) != PhaseKind::point || sketch.count() == 0 || sketch.min() > window.end)
            continue;
        Row row{name, &sketch};
        for (const auto& span : window.covered)
            if (span.name == name) {
                row.begin = span.begin;
                row.end = span.end;
                row.span = true;
            }
        rows.push_back(row);
        x_max = std::max(x_max, sketch.max());
    }
    if (!(x_max > 0))
        x_max = 1e-3;

    constexpr double width = 1040, label_width = 250, row_height = 22, top = 22, axis_room = 30;
    const double height = top + row_height * static_cast<double>(std::max<std::size_t>(rows.size(), 1)) + axis_room;
    const Scale x{0, x_max, label_width + 10, width - 20};
    std::string svg = fmt::format(
        R"(<svg class="chart" id="{}" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="waterfall of the start-up phases">)",
        html_escape(id), width, px(height), width, px(height));
    const double bottom = height - axis_room;
    draw_axis(svg, x, top - 6, bottom);
    for (const auto& gap : window.gaps)
        svg += fmt::format(R"(<rect class="gap" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>)",
                           px(x(gap.begin)), px(top - 6), length(x(gap.end) - x(gap.begin)), length(bottom - top + 6),
                           html_escape(fmt::format("unattributed: {} after {}, before {}",
                                                   format_seconds(gap.end - gap.begin), gap.after, gap.before)));
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        const double middle = top + row_height * (static_cast<double>(i) + 0.5);
        const std::string title = row.sketch
                                      ? quantiles_text(row.name, *row.sketch)
                                      : fmt::format("launcher step {}: {} to {} (+{})", row.name,
                                                    format_seconds(row.begin), format_seconds(row.end),
                                                    format_seconds(row.end - row.begin));
        svg += fmt::format(R"(<g class="row"><title>{}</title>)", html_escape(title));
        svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", px(label_width), px(middle + 4),
                           label_text(row.name, 34));
        if (row.span) {
            const double begin = x(row.begin);
            svg += fmt::format(R"(<rect class="{}" x="{}" y="{}" width="{}" height="{}"/>)",
                               row.sketch ? "app-span" : "step", px(begin), px(middle - row_height * 0.3),
                               length(std::max(x(row.end) - begin, 1.0)), length(row_height * 0.6));
        }
        if (row.sketch)
            draw_distribution(svg, x, middle, row_height * 0.7, *row.sketch, "");
        svg += "</g>";
    }
    const double end = x(window.end);
    svg += fmt::format(R"(<line class="end" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>)", px(end), px(top - 10),
                       px(bottom));
    const bool right_half = end > width / 2;
    svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="{}">{}</text>)", px(right_half ? end - 4 : end + 4),
                       px(top - 10), right_half ? "end" : "start",
                       html_escape(window.end_name + " " + format_seconds(window.end)));
    svg += "</svg>";
    return svg;
}

// ---- A phase's spread: its sketch's buckets as a histogram over [min, max], and the CDF over it. ----

std::string spread_svg(const std::string& name, const Sketch& sketch, std::string_view id)
{
    constexpr double width = 330, height = 150, left = 8, right = width - 8, top = 8, bottom = height - 28;
    std::string svg = fmt::format(
        R"(<svg class="chart spread-chart" id="{}" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}">)",
        html_escape(id), width, height, width, height, html_escape("spread of " + name));
    const SketchData data = sketch.data();
    std::vector<std::pair<double, std::uint64_t>> values;   // (the value a bucket stands for, how many)
    if (data.zero_count > 0)
        values.emplace_back(std::clamp(0.0, sketch.min(), sketch.max()), data.zero_count);
    for (const auto& [key, n] : data.buckets)
        values.emplace_back(std::clamp(Sketch::bucket_value(key), sketch.min(), sketch.max()), n);

    const Scale x{sketch.min(), sketch.max(), left, right};
    const std::size_t bins = sketch.max() > sketch.min() ? std::clamp<std::size_t>(sketch.count(), 1, 30) : 1;
    std::vector<std::uint64_t> counts(bins, 0);
    for (const auto& [value, n] : values) {
        std::size_t bin = 0;
        if (bins > 1)
            bin = std::min(bins - 1, static_cast<std::size_t>((value - sketch.min()) / (sketch.max() - sketch.min()) *
                                                              static_cast<double>(bins)));
        counts[bin] += n;
    }
    const double tallest = static_cast<double>(std::max<std::uint64_t>(1, *std::max_element(counts.begin(), counts.end())));
    const double bin_width = (right - left) / static_cast<double>(bins);
    for (std::size_t i = 0; i < bins; ++i) {
        if (counts[i] == 0)
            continue;
        const double bar = (bottom - top) * static_cast<double>(counts[i]) / tallest;
        svg += fmt::format(R"(<rect class="bar" x="{}" y="{}" width="{}" height="{}"><title>{} values</title></rect>)",
                           px(left + bin_width * static_cast<double>(i) + 0.5), px(bottom - bar),
                           length(bin_width - 1), length(bar), counts[i]);
    }
    // The CDF, a step up at each bucket.
    std::string points = fmt::format("{},{}", px(left), px(bottom));
    std::uint64_t seen = 0;
    for (const auto& [value, n] : values) {
        const double at = x(value);
        points += fmt::format(" {},{}", px(at), px(bottom - (bottom - top) * static_cast<double>(seen) /
                                                              static_cast<double>(sketch.count())));
        seen += n;
        points += fmt::format(" {},{}", px(at), px(bottom - (bottom - top) * static_cast<double>(seen) /
                                                              static_cast<double>(sketch.count())));
    }
    points += fmt::format(" {},{}", px(right), px(top));
    svg += fmt::format(R"(<polyline class="cdf" points="{}"/>)", points);
    for (double q : {0.5, 0.99}) {
        const double at = x(sketch.quantile(q));
        svg += fmt::format(R"(<line class="mark" x1="{0}" x2="{0}" y1="{1}" y2="{2}"><title>{3}</title></line>)",
                           px(at), px(top), px(bottom),
                           html_escape(fmt::format("{} {}", q == 0.5 ? "median" : "p99", value_text(name, sketch.quantile(q)))));
    }
    svg += fmt::format(R"(<line class="axis" x1="{0}" x2="{1}" y1="{2}" y2="{2}"/>)", px(left), px(right), px(bottom));
    svg += fmt::format(R"(<text class="axis-label" x="{}" y="{}">{}</text>)", px(left), px(bottom + 14),
                       html_escape(value_text(name, sketch.min())));
    svg += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="end">{}</text>)", px(right),
                       px(bottom + 14), html_escape(value_text(name, sketch.max())));
    svg += "</svg>";
    return svg;
}

// ---- Page sections ----

std::string meta_line(const JobTiming& timing)
{
    return fmt::format(R"(<p class="meta">job <code>{}</code> &middot; {} nodes, {} ranks &middot; fanout {}, depth {})"
                       R"( &middot; agent {} &middot; wall {} &middot; exit {} &middot; started {}</p>)",
                       html_escape(timing.job_id), timing.nodes, timing.ranks, timing.fanout, timing.tree_depth,
                       html_escape(timing.agent.empty() ? "-" : timing.agent), format_seconds(timing.wall_seconds),
                       timing.exit_code, html_escape(timing.started_at.empty() ? "-" : timing.started_at));
}

std::string job_header(const JobTiming& timing)
{
    std::string out = meta_line(timing);
    out += fmt::format(R"(<p class="command">command: <code>{}</code></p>)", html_escape(timing.command));
    if (timing.failure) {
        out += fmt::format(R"(<p class="failure">failed: {}</p>)", html_escape(timing.failure->line));
        if (!timing.failure->traceback.empty())
            out += fmt::format("<details><summary>traceback</summary><pre>{}</pre></details>",
                               html_escape(timing.failure->traceback));
    }
    // --max-restarts: each attempt's end; the timeline below shows them on the job's one time axis (ranks_restarting,
    // ranks_stopped, and each attempt's ranks_spawned).
    for (std::size_t i = 0; i < timing.restarts.size(); ++i) {
        const auto& restart = timing.restarts[i];
        out += fmt::format(R"(<p class="restart">attempt {} ended at {}: {}; {}</p>)", i + 1,
                           html_escape(format_seconds(restart.failed_at)), html_escape(restart.ended_by),
                           restart.running_again_at < 0
                               ? std::string("its ranks never all ran again")
                               : html_escape(fmt::format("all ranks running again {} later",
                                                         format_seconds(restart.restart_seconds()))));
    }
    return out;
}

std::string summary_cards(const JobTiming& timing, const StartupWindow& window)
{
    std::string out = R"(<div class="cards">)";
    out += fmt::format(R"(<div class="card"><div class="sub">start-up</div><div class="big">{}</div>)"
                       R"(<div class="sub">launcher start to {}</div></div>)",
                       format_seconds(window.end), html_escape(describe_end(window)));
    out += fmt::format(R"(<div class="card{}"><div class="sub">unattributed</div><div class="big">{:.1f}%</div>)"
                       R"(<div class="sub">{} no step or phase covers</div></div>)",
                       window.share() >= 0.01 ? " warn" : "", 100.0 * window.share(),
                       format_seconds(window.unattributed));
    out += fmt::format(R"(<div class="card"><div class="sub">wall</div><div class="big">{}</div>)"
                       R"(<div class="sub">launcher start to exit {}</div></div>)",
                       format_seconds(timing.wall_seconds), timing.exit_code);
    out += "</div>";
    return out;
}

std::string phase_table(const std::vector<const NamedSketch*>& ordered)
{
    std::string out = R"(<table class="phases"><thead><tr><th>phase</th><th class="num">count</th>)"
                      R"(<th class="num">min</th><th class="num">median</th><th class="num">p99</th>)"
                      R"(<th class="num">max</th><th>slowest</th></tr></thead><tbody>)";
    for (const auto* phase : ordered) {
        const auto& [name, sketch] = *phase;
        out += fmt::format(R"(<tr><td class="mono">{}</td><td class="num">{}</td><td class="num">{}</td>)"
                           R"(<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td>{}</td></tr>)",
                           html_escape(name), sketch.count(), value_text(name, sketch.min()),
                           value_text(name, sketch.median()), value_text(name, sketch.quantile(0.99)),
                           value_text(name, sketch.max()), html_escape(sketch.max_who()));
    }
    out += "</tbody></table>";
    return out;
}

std::string unattributed_section(const StartupWindow& window, std::string_view prefix)
{
    std::string out = fmt::format(R"(<section id="{}unattributed"><h2>Unattributed time</h2>)", prefix);
    out += fmt::format(R"(<p><b>{} of {} ({:.1f}%)</b> from the launcher's start to {} is covered by no launcher step )"
                       R"(and no application phase (<code>canopy.phase</code>, <code>canopy_mark_duration</code>).)"
                       R"( Time a rank spends before its first phase, or between phases, shows up here.</p>)",
                       format_seconds(window.unattributed), format_seconds(window.end), 100.0 * window.share(),
                       html_escape(describe_end(window)));
    if (!window.gaps.empty()) {
        out += R"(<table class="gaps"><thead><tr><th class="num">from</th><th class="num">to</th>)"
               R"(<th class="num">length</th><th>after</th><th>before</th></tr></thead><tbody>)";
        for (const auto& gap : window.gaps)
            out += fmt::format(R"(<tr><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>)"
                               R"(<td class="mono">{}</td><td class="mono">{}</td></tr>)",
                               format_seconds(gap.begin), format_seconds(gap.end), format_seconds(gap.end - gap.begin),
                               html_escape(gap.after), html_escape(gap.before));
        out += "</tbody></table>";
    }
    out += "</section>";
    return out;
}

std::string too_many_note(std::size_t shown, std::size_t total)
{
    if (shown >= total)
        return {};
    return fmt::format(R"(<p class="note">The first {} of {} phases are shown; the JSON holds them all.</p>)", shown,
                       total);
}

std::string spread_section(const std::vector<const NamedSketch*>& ordered, std::string_view prefix)
{
    std::string out = fmt::format(R"(<section id="{}spread"><h2>Spread of each phase across nodes and ranks</h2>)"
                                  R"(<p class="note">Histogram of each phase's sketch (within 1 %) from min to max, )"
                                  R"(its CDF in orange, the median and p99 dashed.</p><div class="grid">)",
                                  prefix);
    std::size_t shown = 0;
    for (std::size_t i = 0; i < ordered.size() && shown < max_phase_figures; ++i) {
        const auto& [name, sketch] = *ordered[i];
        if (sketch.count() == 0)
            continue;
        ++shown;
        out += fmt::format(R"(<figure><figcaption><code>{}</code> &middot; {} values &middot; median {} &middot; p99 {})"
                           R"( &middot; max {}</figcaption>{}</figure>)",
                           html_escape(name), sketch.count(), value_text(name, sketch.median()),
                           value_text(name, sketch.quantile(0.99)), value_text(name, sketch.max()),
                           spread_svg(name, sketch, fmt::format("{}spread-{}", prefix, i)));
    }
    out += "</div>" + too_many_note(shown, ordered.size()) + "</section>";
    return out;
}

std::string slowest_section(const JobTiming& timing, const std::vector<const NamedSketch*>& ordered,
                            std::string_view prefix)
{
    std::string out = fmt::format(R"(<section id="{}slowest"><h2>Slowest nodes and ranks</h2>)", prefix);
    if (!timing.top_recorded) {
        out += R"(<p class="note">Not in this file: it was written by a canopy from before the top-k lists.</p>)"
               "</section>";
        return out;
    }
    out += fmt::format(R"(<p class="note">The {} largest values of each phase (latest, longest or most), with who )"
                       R"(produced them and how far behind the phase's median they are; kept exactly as the tree )"
                       R"(merged them (<code>--timing-top K</code>).</p><div class="grid">)",
                       timing.phases.top_k());
    std::size_t shown = 0;
    for (const auto* phase : ordered) {
        const auto& [name, sketch] = *phase;
        if (sketch.top().empty())
            continue;
        if (++shown > max_phase_figures)
            break;
        out += fmt::format(R"(<table class="slowest"><caption><code>{}</code></caption><thead><tr><th>#</th>)"
                           R"(<th>who</th><th class="num">value</th><th class="num">vs median</th></tr></thead><tbody>)",
                           html_escape(name));
        for (std::size_t i = 0; i < sketch.top().size(); ++i) {
            const auto& entry = sketch.top()[i];
            const double behind = entry.value - sketch.median();
            out += fmt::format(R"(<tr><td>{}</td><td class="mono">{}</td><td class="num">{}</td>)"
                               R"(<td class="num">{}{}</td></tr>)",
                               i + 1, html_escape(entry.who), value_text(name, entry.value), behind >= 0 ? "+" : "",
                               value_text(name, behind));
        }
        out += "</tbody></table>";
    }
    out += "</div>" + too_many_note(std::min(shown, max_phase_figures), ordered.size()) + "</section>";
    return out;
}

// Everything about one run; `prefix` keeps element ids unique when a page holds two.
std::string run_sections(const JobTiming& timing, std::string_view prefix)
{
    const StartupWindow window = startup_window(timing);
    const auto ordered = ordered_phases(timing.phases);
    std::string out = summary_cards(timing, window);
    out += fmt::format(R"(<section id="{}waterfall-section"><h2>Start-up waterfall</h2>)", prefix);
    out += R"(<p class="legend"><span><i class="swatch step"></i>launcher step</span>)"
           R"(<span><i class="swatch app-span"></i>application phase (mean)</span>)"
           R"(<span><i class="swatch tail"></i>median to p99</span><span>&#9474; min to max</span>)"
           R"(<span><i class="swatch gap"></i>unattributed</span></p>)";
    out += waterfall_svg(timing, window, fmt::format("{}waterfall", prefix));
    out += phase_table(ordered);
    out += "</section>";
    out += unattributed_section(window, prefix);
    out += slowest_section(timing, ordered, prefix);
    out += spread_section(ordered, prefix);
    return out;
}

std::string page(std::string_view title, const std::string& body, const json& embedded)
{
    std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
    // Nothing may be fetched: no scripts run and no resource loads, whatever a string in the report says.
    out += R"(<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">)";
    out += R"(<meta name="viewport" content="width=device-width, initial-scale=1">)";
    out += fmt::format("<title>{}</title><style>{}</style></head><body>\n", html_escape(title), style);
    out += body;
    out += fmt::format("\n{}{}{}\n</body></html>\n", embedded_open, script_json(embedded), embedded_close);
    return out;
}

// ---- The comparison: each phase's median and tails in both runs, on one scale. ----

std::string comparison_svg(const JobTiming& before, const JobTiming& after, const std::optional<PhaseChange>& most)
{
    std::vector<std::string> names;
    std::unordered_set<std::string> seen;
    for (const auto* run : {&before, &after})
        for (const auto* phase : ordered_phases(run->phases))
            if (phase_kind(phase->first) != PhaseKind::count && seen.insert(phase->first).second)
                names.push_back(phase->first);
    if (names.size() > max_phase_figures)
        names.resize(max_phase_figures);
    double x_max = 1e-3;
    for (const auto& name : names)
        for (const auto* run : {&before, &after})
            if (const Sketch* sketch = run->phases.find(name); sketch && sketch->count() > 0)
                x_max = std::max(x_max, sketch->max());

    constexpr double width = 1040, label_width = 250, row_height = 26, top = 12, axis_room = 30;
    const double height = top + row_height * static_cast<double>(std::max<std::size_t>(names.size(), 1)) + axis_room;
    const Scale x{0, x_max, label_width + 10, width - 20};
    std::string svg = fmt::format(
        R"(<svg class="chart" id="comparison" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="the two runs' phases side by side">)",
        width, px(height), width, px(height));
    const double bottom = height - axis_room;
    for (std::size_t i = 0; i < names.size(); ++i)
        if (most && names[i] == most->name)
            svg += fmt::format(R"(<rect class="flagged" x="0" y="{}" width="{}" height="{}"/>)",
                               px(top + row_height * static_cast<double>(i)), width, px(row_height));
    draw_axis(svg, x, top - 4, bottom);
    for (std::size_t i = 0; i < names.size(); ++i) {
        const double middle = top + row_height * (static_cast<double>(i) + 0.5);
        svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", px(label_width), px(middle + 4),
                           label_text(names[i], 34));
        for (const auto& [run, offset, cls] : {std::tuple{&before, -5.0, "run-a"}, std::tuple{&after, 5.0, "run-b"}}) {
            const Sketch* sketch = run->phases.find(names[i]);
            if (sketch == nullptr || sketch->count() == 0)
                continue;
            svg += fmt::format(R"(<g><title>{}: {}</title>)", cls == std::string_view("run-a") ? "A" : "B",
                               html_escape(quantiles_text(names[i], *sketch)));
            draw_distribution(svg, x, middle + offset, 9, *sketch, cls);
            svg += "</g>";
        }
    }
    svg += "</svg>";
    return svg;
}

std::string comparison_table(const JobTiming& before, const JobTiming& after, const std::optional<PhaseChange>& most)
{
    std::string out = R"(<table class="comparison"><thead><tr><th>phase</th><th class="num">A median</th>)"
                      R"(<th class="num">B median</th><th class="num">B/A</th><th class="num">A p99</th>)"
                      R"(<th class="num">B p99</th><th class="num">A max</th><th class="num">B max</th></tr></thead><tbody>)";
    std::unordered_set<std::string> seen;
    for (const auto* run : {&before, &after})
        for (const auto* phase : ordered_phases(run->phases)) {
            const std::string& name = phase->first;
            if (!seen.insert(name).second)
                continue;
            const Sketch* a = before.phases.find(name);
            const Sketch* b = after.phases.find(name);
            auto cell = [&name](const Sketch* sketch, double q) {
                return sketch && sketch->count() > 0 ? value_text(name, sketch->quantile(q)) : std::string("-");
            };
            std::string ratio;
            if (a && b && a->count() > 0 && b->count() > 0 && a->median() > 0)
                ratio = fmt::format("{:.2f}x", b->median() / a->median());
            const bool flagged = most && most->name == name;
            out += fmt::format(R"(<tr{}><td class="mono">{}{}</td><td class="num">{}</td><td class="num">{}</td>)"
                               R"(<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>)"
                               R"(<td class="num">{}</td><td class="num">{}</td></tr>)",
                               flagged ? R"( class="flagged")" : "", html_escape(name),
                               flagged ? " &larr; changed most" : "", cell(a, 0.5), cell(b, 0.5), ratio,
                               cell(a, 0.99), cell(b, 0.99), cell(a, 1.0), cell(b, 1.0));
        }
    out += "</tbody></table>";
    return out;
}

} // namespace

std::string html_escape(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

std::string script_json(const json& document)
{
    const std::string text = document.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '<': out += "\\u003c"; break;
        case '>': out += "\\u003e"; break;
        case '&': out += "\\u0026"; break;
        default: out += c;
        }
    }
    return out;
}

std::string format_html_report(const JobTiming& timing, std::string_view origin)
{
    std::string body = fmt::format("<h1>canopy start-up report</h1>{}", job_header(timing));
    if (!origin.empty())
        body += fmt::format(R"(<p class="note">from {}</p>)", html_escape(origin));
    body += run_sections(timing, "");
    return page(fmt::format("canopy start-up: job {}", timing.job_id), body, to_json(timing));
}

std::string format_html_comparison(const JobTiming& before, const JobTiming& after, std::string_view before_name,
                                   std::string_view after_name)
{
    const auto most = changed_most(before.phases, after.phases);
    std::string body = "<h1>canopy start-up comparison</h1>";
    body += fmt::format(R"(<h3><span class="swatch run-a"></span>A: {}</h3>{})", html_escape(before_name),
                        job_header(before));
    body += fmt::format(R"(<h3><span class="swatch run-b"></span>B: {}</h3>{})", html_escape(after_name),
                        job_header(after));
    body += R"(<section id="comparison-section"><h2>Medians and tails, A against B</h2>)";
    if (most)
        body += fmt::format(R"(<p class="card warn" id="changed-most">Changed most: <code>{}</code>, median {} &rarr; {})"
                            R"( ({}{})</p>)",
                            html_escape(most->name), format_seconds(most->before), format_seconds(most->after),
                            most->after >= most->before ? "+" : "", format_seconds(most->after - most->before));
    else
        body += R"(<p class="note">The runs have no timed phase in common.</p>)";
    body += R"(<p class="legend"><span><i class="swatch run-a"></i>A</span><span><i class="swatch run-b"></i>B</span>)"
            R"(<span>box: median to p99; whisker: min to max</span></p>)";
    body += comparison_svg(before, after, most);
    body += comparison_table(before, after, most);
    body += "</section>";
    body += fmt::format(R"(<h2 class="run">A: {}</h2>)", html_escape(before_name)) + run_sections(before, "a-");
    body += fmt::format(R"(<h2 class="run">B: {}</h2>)", html_escape(after_name)) + run_sections(after, "b-");
    return page("canopy start-up comparison", body, to_json(before));
}

std::optional<std::string> embedded_timing_json(std::string_view html)
{
    const auto open = html.find(embedded_open);
    if (open == std::string_view::npos)
        return std::nullopt;
    const auto begin = open + embedded_open.size();
    const auto close = html.find(embedded_close, begin);
    if (close == std::string_view::npos)
        return std::nullopt;
    return std::string(html.substr(begin, close - begin));
}

} // namespace canopy::timing
