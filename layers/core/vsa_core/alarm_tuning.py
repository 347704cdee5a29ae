"""The scaling alarms' tuning (pure): the low alarm's margin and how many one-minute periods each
alarm evaluates. The array's alarms are made with them (``vsa_core.arrays.plan.alarm_params``,
``alarm_thresholds``), and the planner, ScaleArray's rules and the simulator reason with the same
figures, so they sit below every capability."""

SCALE_IN_HYSTERESIS = 0.9
"""The low threshold sits 10% below what one controller fewer could serve at target: demand just
under the line does not make the array flap between n and n-1 controllers. (0.8 kept controllers
for a decay the oracle had long shed; 1.0 scales in onto the line and flaps; see docs/scaling.md.)"""

HIGH_EVALUATION_PERIODS = 2
HIGH_DATAPOINTS_TO_ALARM = 2
"""Scale out after 2 of 2 one-minute periods above target: a controller takes ~5 minutes to
launch, attach every volume and get a path from every host, and every minute of detection is a
minute the surge is starved on top of the boot, so react on the second minute, not on a single
noisy one (3 of 3 starved each surge one minute more for no saving)."""

LOW_EVALUATION_PERIODS = 5
LOW_DATAPOINTS_TO_ALARM = 5
"""Scale in after 5 of 5 one-minute periods below: one controller at a time, each after a drain
and the scale-in cooldown, so the window guards each single step against a dip, not the whole
descent (15 of 15 made a descent from 14 controllers take hours the demand did not need)."""
