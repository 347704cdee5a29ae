"""ReconcileArray: converging the data plane (volumes attached, exported and connected; hosts
allowed and connected) on every change of an array's spec."""
