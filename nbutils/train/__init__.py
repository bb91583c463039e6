"""Training-side building blocks: checkpoint manifests, the output_dir run lock, disk-space errors, fault points."""
