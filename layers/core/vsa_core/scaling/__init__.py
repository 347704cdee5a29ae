"""Scaling on IOPS demand: the planner and its tuning, ScaleArray's rules and event models, the
forecast floor, the simulator (vsactl, the benchmark); on AWS, reading and publishing demand and
the PlanScale step (``aws_*``)."""
