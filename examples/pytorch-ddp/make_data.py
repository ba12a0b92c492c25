"""Writes a synthetic card-transactions table for train.py to stdout.

    python3 make_data.py [ROWS] > transactions.csv

Columns: amount, merchant_risk, hour, distance_km, foreign, label. The
label (1 = fraud) is drawn from a logistic model of the features, so the
table is learnable but not separable. Seeded: the same rows every run.
"""

import sys

try:
    import numpy as np
except ImportError:
    sys.exit("make_data.py needs NumPy: apt-get install python3-numpy (Debian), "
             "or pip install numpy")


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rng = np.random.default_rng(2026)
    amount = rng.lognormal(3.5, 1.0, rows)
    merchant_risk = rng.beta(2, 5, rows)
    hour = rng.integers(0, 24, rows).astype(float)
    distance_km = rng.exponential(20, rows)
    foreign = (rng.random(rows) < 0.1).astype(float)
    night = ((hour < 6) | (hour >= 23)).astype(float)
    z = (-6.0 + 0.6 * np.log(amount) + 4.0 * merchant_risk + 1.2 * night
         + 0.02 * distance_km + 1.5 * foreign)
    label = (rng.random(rows) < 1 / (1 + np.exp(-z))).astype(int)
    out = sys.stdout
    out.write("amount,merchant_risk,hour,distance_km,foreign,label\n")
    for i in range(rows):
        out.write(f"{amount[i]:.2f},{merchant_risk[i]:.4f},{hour[i]:.0f},"
                  f"{distance_km[i]:.2f},{foreign[i]:.0f},{label[i]}\n")


if __name__ == "__main__":
    main()
