#!/bin/sh
# Slurm's HealthCheckProgram (slurm.conf: HealthCheckProgram=/path/to/this,
# HealthCheckInterval=30; `fmstack slurm config --health-check PATH` writes
# both). slurmd runs it as root on every node; it runs fmstack's node checks
# once and drains the node in Slurm, with the failed check's reason, when a
# check that asks for an action fails. Set FMSTACK (the binary) and
# FMSTACK_CHECKS / FMSTACK_DEVICES (a check table, "nvml") as the site needs.
exec "${FMSTACK:-fmstack}" agent --once --slurm-drain --run-dir "${FMSTACK_DISK:-/tmp}" \
  --devices "${FMSTACK_DEVICES:-none}" ${FMSTACK_CHECKS:+--checks "$FMSTACK_CHECKS"} > /dev/null
