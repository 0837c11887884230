"""What a training run is: the model, the cluster, the parallel layout, the frameworks that run it
and the GPUs it runs on, as typed and validated configurations, tables of them and files."""
