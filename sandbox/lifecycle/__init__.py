"""Where a sandbox runs: the Docker backend, images, the base image, the warm pool, the reaper and owner labels."""
