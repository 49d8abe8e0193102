#!/usr/bin/env python3
"""Bar chart of a peers table (benches/peers/compare.sh): img/s per loader
and img/s per CPU core, as one PNG. Needs only Pillow.

    chart.py RESULTS.json OUT.png
"""
import json
import sys

from PIL import Image, ImageDraw


def main():
    rows = json.load(open(sys.argv[1]))["loaders"]
    w, bar_h, pad, label_w = 900, 26, 12, 300
    panels = [("images / s", "img_per_s"), ("images / s per CPU core", "img_per_s_per_core")]
    h = pad + sum(30 + len(rows) * (bar_h + 6) + pad for _ in panels)
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    y = pad
    colours = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#718096"]
    for title, key in panels:
        d.text((pad, y), title, fill="black")
        y += 30
        top = max(r[key] for r in rows) or 1
        for i, r in enumerate(rows):
            d.text((pad, y + 7), r["name"], fill="black")
            length = int((w - label_w - 120) * r[key] / top)
            d.rectangle([label_w, y, label_w + max(length, 1), y + bar_h], fill=colours[i % len(colours)])
            d.text((label_w + length + 8, y + 7), f"{r[key]:,.0f}", fill="black")
            y += bar_h + 6
        y += pad
    img.save(sys.argv[2])


if __name__ == "__main__":
    main()
