"""results.md (tables, targets) and PNG plots in the manner of the paper's Figures 4 and 5
(throughput against MB sent) from a list of runs."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable
from typing import Any

from bench.paper.runner import Run

PEERS = ("rabbitmq", "activemq")
# The issue's targets, pykfk driven by confluent-kafka.
CEILING_RATIO = 0.8
PEER_RATIO_BATCHED = 15.0
PEER_RATIO_SINGLE = 5.0
OVERHEAD_LIMIT = 12.0
# Smallest window over which a plotted throughput point is computed (progress lines come
# every ~100 ms; shorter windows are mostly scheduling noise).
PLOT_WINDOW = 0.25

TEST_ORDER = {"produce b1": 0, "produce b50": 1, "produce bdefault": 2, "consume": 3}
SYSTEM_ORDER = {"pykfk": 0, "mock": 1, "rabbitmq": 2, "activemq": 3}


class Row:
    """The runs of one (system, client, test), summarised."""

    def __init__(self, runs: list[Run]):
        self.runs = runs
        first = runs[0]
        self.system, self.client, self.test, self.size = first.system, first.client, first.test, first.size
        self.ok = [r for r in runs if not r.error and r.seconds > 0]
        rates = [r.msgs_per_s for r in self.ok]
        self.median = statistics.median(rates) if rates else 0.0
        self.low = min(rates) if rates else 0.0
        self.high = max(rates) if rates else 0.0
        self.count = statistics.median([r.count for r in self.ok]) if self.ok else 0
        cpu = [r.broker_cpu / r.count * 1e6 for r in self.ok if r.broker_cpu is not None and r.count]
        self.cpu_per_m = statistics.median(cpu) if cpu else None
        rss = [r.broker_peak_rss_kb for r in self.ok if r.broker_peak_rss_kb]
        self.peak_rss_mb = max(rss) / 1024 if rss else None
        disk = [r.disk_bytes / r.stored_records for r in self.ok if r.disk_bytes and r.stored_records]
        self.disk_per_msg = statistics.median(disk) if disk else None
        per_batch = [r.stored_records / r.stored_batches for r in self.ok
                     if r.stored_records and r.stored_batches and r.system == "pykfk"]
        self.records_per_batch = statistics.median(per_batch) if per_batch else None
        busy = [r.broker_cpu / r.seconds for r in self.ok if r.broker_cpu is not None]
        self.broker_busy = statistics.median(busy) if busy else None
        self.load = statistics.median([r.load1 for r in runs])
        self.notes = sorted({r.note for r in runs if r.note})
        self.errors = sorted({r.error for r in runs if r.error})
        stored = [r for r in self.ok if r.stored_records is not None and r.system == "pykfk"
                  and r.test.startswith("produce") and r.stored_records != r.count]
        if stored:
            self.errors.append(f"{len(stored)} run(s) stored a different count than sent")

    @property
    def mb_per_s(self) -> float:
        return self.median * self.size / 1e6

    @property
    def overhead(self) -> float | None:
        return None if self.disk_per_msg is None else self.disk_per_msg - self.size

    @property
    def client_busiest(self) -> tuple[str, float] | None:
        """The median run's busiest client thread and its share of one core."""
        run = self.median_run()
        if run is None or not run.client_threads:
            return None
        name, share = run.client_threads[0]
        return name, share

    def median_run(self) -> Run | None:
        if not self.ok:
            return None
        ranked = sorted(self.ok, key=lambda r: r.msgs_per_s)
        return ranked[(len(ranked) - 1) // 2]


def summarise(runs: Iterable[Run]) -> list[Row]:
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.system, r.client, r.test), []).append(r)
    rows = [Row(v) for v in groups.values()]
    rows.sort(key=lambda row: (TEST_ORDER.get(row.test, 9), SYSTEM_ORDER.get(row.system, 9), row.client))
    return rows


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    head = ("| test | system | client | msgs | msg/s (median) | spread (min–max) | MB/s | runs ok "
            "| broker CPU s / 1M msg | broker peak RSS MB | disk B/msg | overhead B/msg "
            "| records/batch on disk | busy: broker · client's busiest thread | load1 | notes |")
    lines = [head, "|" + "---|" * 16]
    for row in rows:
        spread = f"{row.low:,.0f}–{row.high:,.0f}" if row.ok else "–"
        notes = "; ".join(row.notes + [f"**{e}**" for e in row.errors])
        lines.append(
            f"| {row.test} | {row.system} | {row.client} | {row.count:,.0f} | {row.median:,.0f} | {spread} "
            f"| {row.mb_per_s:.1f} | {len(row.ok)}/{len(row.runs)} | {_fmt(row.cpu_per_m, '.2f')} "
            f"| {_fmt(row.peak_rss_mb, '.0f')} | {_fmt(row.disk_per_msg, '.1f')} "
            f"| {_fmt(row.overhead, '.1f')} | {_fmt(row.records_per_batch, '.1f')} "
            f"| {_busy(row)} | {row.load:.2f} | {notes} |"
        )
    return "\n".join(lines)


def _busy(row: Row) -> str:
    """Shares of one core: the broker process and the client's busiest thread. A share
    near 100% names what bounds the run."""
    broker = "–" if row.broker_busy is None else f"{row.broker_busy:.0%}"
    client = row.client_busiest
    return f"{broker} · " + ("–" if client is None else f"{client[0]} {client[1]:.0%}")


def _find(rows: list[Row], system: str, client: str, test: str) -> Row | None:
    return next((r for r in rows if (r.system, r.client, r.test) == (system, client, test) and r.ok), None)


def _best_peer(rows: list[Row], produce: bool) -> Row | None:
    candidates = [r for r in rows if r.system in PEERS and r.ok
                  and (r.test.startswith("produce") if produce else r.test == "consume")]
    return max(candidates, key=lambda r: r.median, default=None)


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's targets, each with the figures it compares and whether it is met."""
    out: list[dict[str, Any]] = []

    def ratio(name: str, ours: Row | None, theirs: Row | None, limit: float) -> None:
        if ours is None or theirs is None or theirs.median <= 0:
            out.append({"target": name, "ours": ours, "theirs": theirs, "ratio": None,
                        "limit": limit, "met": None})
            return
        value = ours.median / theirs.median
        out.append({"target": name, "ours": ours, "theirs": theirs, "ratio": value,
                    "limit": limit, "met": value >= limit})

    for test in ("produce b50", "produce bdefault", "consume"):
        ratio(f"{test}: pykfk/confluent ≥ {CEILING_RATIO}× mock ceiling",
              _find(rows, "pykfk", "confluent", test), _find(rows, "mock", "confluent", test),
              CEILING_RATIO)
    best_producer = _best_peer(rows, produce=True)
    ratio(f"produce b50: pykfk/confluent ≥ {PEER_RATIO_BATCHED:.0f}× faster peer",
          _find(rows, "pykfk", "confluent", "produce b50"), best_producer, PEER_RATIO_BATCHED)
    ratio(f"produce b1: pykfk/confluent ≥ {PEER_RATIO_SINGLE:.0f}× faster peer",
          _find(rows, "pykfk", "confluent", "produce b1"), best_producer, PEER_RATIO_SINGLE)
    ratio(f"consume: pykfk/confluent ≥ {PEER_RATIO_BATCHED:.0f}× faster peer",
          _find(rows, "pykfk", "confluent", "consume"), _best_peer(rows, produce=False),
          PEER_RATIO_BATCHED)
    b50 = _find(rows, "pykfk", "confluent", "produce b50")
    overhead = b50.overhead if b50 is not None else None
    out.append({"target": f"storage overhead at batch 50 ≤ {OVERHEAD_LIMIT:.0f} B/msg incl. indexes",
                "ours": b50, "theirs": None, "ratio": overhead, "limit": OVERHEAD_LIMIT,
                "met": None if overhead is None else overhead <= OVERHEAD_LIMIT})
    return out


def targets_table(rows: list[Row]) -> str:
    lines = ["| target | pykfk (msg/s) | compared with | theirs (msg/s) | ratio / value | met |",
             "|---|---|---|---|---|---|"]
    for t in targets(rows):
        ours, theirs = t["ours"], t["theirs"]
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        value = "–" if t["ratio"] is None else (f"{t['ratio']:.2f} B" if theirs is None and "storage" in t["target"]
                                                 else f"{t['ratio']:.2f}×")
        lines.append(
            f"| {t['target']} | {_fmt(ours.median if ours else None)} "
            f"| {'–' if theirs is None else f'{theirs.system}/{theirs.client} {theirs.test}'} "
            f"| {_fmt(theirs.median if theirs else None)} | {value} | {met} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- plots

def _throughput_points(run: Run) -> tuple[list[float], list[float]]:
    """(MB sent so far, msg/s over the last >= PLOT_WINDOW seconds) along a run."""
    xs: list[float] = []
    ys: list[float] = []
    series = run.series
    j = 0
    for i in range(1, len(series)):
        t, count = series[i]
        while j + 1 < i and t - series[j + 1][0] >= PLOT_WINDOW:
            j += 1
        t0, c0 = series[j]
        if t - t0 >= PLOT_WINDOW and count > c0:
            xs.append(count * run.size / 1e6)
            ys.append((count - c0) / (t - t0))
    if not xs and run.seconds > 0:  # a run shorter than one window: its mean rate
        xs, ys = [0.0, run.count * run.size / 1e6], [run.msgs_per_s, run.msgs_per_s]
    return xs, ys


def plot(rows: list[Row], tests: list[str], path: str, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tests = [t for t in tests if any(r.test == t for r in rows)]
    if not tests:
        return None
    # One colour per system/client in every panel; line style tells the system kind.
    labels = sorted({f"{r.system}/{r.client}" for r in rows},
                    key=lambda label: (SYSTEM_ORDER.get(label.split("/")[0], 9), label))
    palette = plt.get_cmap("tab10")
    colours = {label: palette(i % 10) for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, len(tests), figsize=(6.5 * len(tests), 5), squeeze=False)
    for ax, test in zip(axes[0], tests, strict=True):
        medians = []
        for row in rows:
            run = row.median_run() if row.test == test else None
            if run is None:
                continue
            xs, ys = _throughput_points(run)
            if xs:
                label = f"{row.system}/{row.client}"
                style = "-" if row.system == "pykfk" else "--" if row.system == "mock" else ":"
                ax.plot(xs, ys, style, label=label, color=colours[label], linewidth=1.8)
                medians.append(row.median)
        ax.set_title(test.replace("produce b", "producer, batch ").replace("consume", "consumer"))
        ax.set_xlabel("MB sent" if test.startswith("produce") else "MB consumed")
        ax.set_ylabel("throughput (messages/s)")
        ax.set_yscale("log")
        if medians:
            # Clients that wait for the broker to catch up at the end dip towards zero;
            # keep the axis on the steady state.
            ax.set_ylim(bottom=min(medians) / 5)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_runs(path: str) -> tuple[list[Run], dict[str, Any]]:
    """Runs and metadata back from a results.json (to redraw a report)."""
    import json

    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    runs = []
    for raw in data["runs"]:
        fields = {k: v for k, v in raw.items() if k in Run.__dataclass_fields__}
        fields["series"] = [tuple(point) for point in fields.get("series", [])]
        runs.append(Run(**fields))
    return runs, data["meta"]


# ---------------------------------------------------------------- results.md

def write(out_dir: str, runs: list[Run], meta: dict[str, Any]) -> str:
    rows = summarise(runs)
    opts, machine = meta["options"], meta["machine"]
    producer_png = plot(rows, ["produce b1", "produce b50", "produce bdefault"],
                        os.path.join(out_dir, "producer.png"),
                        f"Producer throughput ({opts['size']}-byte messages; cf. the paper's Figure 4)")
    consumer_png = plot(rows, ["consume"], os.path.join(out_dir, "consumer.png"),
                        "Consumer throughput (cf. the paper's Figure 5)")
    lines = [
        "# The paper's experiments: pykfk, RabbitMQ, ActiveMQ",
        "",
        (f"- {machine['started']} → {machine['finished']}, commit {machine['commit']}, "
         f"{machine['cores']} cores ({machine['cpu']}), Python {machine['python']}, "
         f"kernel {machine['kernel']}"),
        (f"- load average (1/5/15 min) at start {_load(machine['load_start'])}, at end "
         f"{_load(machine['load_end'])}; the machine is shared, so figures are noisy "
         "(each row's load1 is the median at its runs' start)"),
        (f"- N = {opts['n']:,} messages of {opts['size']} bytes per producer run, a run "
         f"stopping after {opts['max_seconds']:.0f} s if N is not reached yet (column "
         f"msgs: what the median run sent); {opts['runs']} run(s) each; consumer fetch "
         f"{opts['fetch_bytes']:,} bytes; Kafka producers acks={opts['acks']}"),
        f"- versions: {', '.join(f'{k} {v}' for k, v in sorted(machine['versions'].items()))}",
        "",
        "## Configuration",
        "",
    ]
    for system, note in meta["config"].items():
        lines.append(f"- **{system}**: {note}")
    if meta["skipped"]:
        lines += ["", "Skipped: " + "; ".join(meta["skipped"])]
    lines += ["", "## Results", "", table(rows), "", "## Targets (issue 8)", "", targets_table(rows), ""]
    lines += [
        "Peers have no multi-message produce request: their \"b50\" is the one grouping each",
        "API offers (RabbitMQ: publisher confirms awaited per 50; ActiveMQ: a transaction",
        "committed per 50) and \"b1\" is one message per publish without waiting. \"Faster",
        "peer\" is the fastest producer row (any mode, any client) of RabbitMQ and ActiveMQ,",
        "or their fastest consumer row. Disk B/msg: pykfk = its topic's partition directory",
        "(log + indexes, allocated blocks) / records stored; peers = growth of the whole store",
        "during the first producer run after the broker started (stores are shared by queues).",
        "The mock keeps only ~5 MB a partition and answers a Fetch with one stored batch: its",
        "consumer figure re-reads 20,000 messages in 1000-record batches, seeking back after",
        "each pass, so it is a lower bound of the client's consume ceiling.",
        "Busy: CPU seconds per second of the timed section, as a share of one core, of the",
        "broker process and of the client process's busiest thread (librdkafka's own threads",
        "are rdk:*; \"(main)\" is the thread calling the client's API). A thread near 100%,",
        "or the sum of both sides near the machine's cores, is what bounds the run;",
        "`python -m bench.paper.profile` shows where that thread's time goes.",
        "",
    ]
    for png in (producer_png, consumer_png):
        if png:
            lines.append(f"![{os.path.basename(png)}]({os.path.basename(png)})")
    markdown = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown)
    return markdown


def _load(values: Any) -> str:
    return "/".join(f"{v:.2f}" for v in values)
