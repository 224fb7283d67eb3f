class ModelNew(
