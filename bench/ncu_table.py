#!/usr/bin/env python3
"""Reads the CSV that `ncu --csv --metrics gpu__time_duration.sum` prints for
one training step (bench_gpu --profile) and prints where the step's GPU time
went: one row per kernel name (template arguments and parameters dropped),
its launches, milliseconds and share, largest first.

Usage: ncu_table.py NCU_CSV [--top 25]
"""
import argparse, collections, csv, re, sys


def short(name):
    name = re.sub(r"\(.*$", "", name)          # parameters
    depth, out = 0, []
    for ch in name:                              # template arguments
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">"
    name = "".join(out)
    return re.sub(r"^.*::", "", name.replace("void ", "").strip())[:60]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own ==PROF== lines are not CSV
    ns, launches = collections.Counter(), collections.Counter()
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, 1)
        k = short(row["Kernel Name"])
        ns[k] += value * scale
        launches[k] += 1
    total = sum(ns.values())
    if total == 0:
        sys.exit(f"ncu_table: no gpu__time_duration.sum rows in {a.csv}")
    print(f"{'kernel':60}  {'launches':>8}  {'ms':>8}  {'share':>6}")
    for k, v in ns.most_common(a.top):
        print(f"{k:60}  {launches[k]:8d}  {v / 1e6:8.2f}  {100 * v / total:5.1f}%")
    print(f"{'all ' + str(len(ns)) + ' kernels':60}  {sum(launches.values()):8d}  {total / 1e6:8.2f}  100.0%")


if __name__ == "__main__":
    main()
