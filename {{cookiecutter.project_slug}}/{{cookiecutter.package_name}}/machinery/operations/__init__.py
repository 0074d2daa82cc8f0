"""Operations on a job's state and runs: inspect, repartition, savepoints, calibration, bench, sustain, packaging."""
