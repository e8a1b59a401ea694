"""Certification: Slurm jobs (nccl-tests, the torch sweep, the smoke training), criteria, reports."""
