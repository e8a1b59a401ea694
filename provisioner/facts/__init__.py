"""What the roles compute through the filter plugins: fabric, fleet versions, monitoring,
packages, Slurm configuration and states, NCCL settings, CUDA compatibility, tables."""
