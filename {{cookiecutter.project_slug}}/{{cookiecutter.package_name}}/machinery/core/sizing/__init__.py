"""State sizing: the capacity estimate, cluster sizing and calibration on a real run."""
