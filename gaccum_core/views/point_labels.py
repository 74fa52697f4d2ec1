"""Text labels beside a scatter chart's points that overlap neither each other nor a point: each label takes the
first of eight places around its point (right, left, above, below, then the corners) that is clear of the labels placed before it,
of every point and of the plot's edges; a label with no clear place, or the same words as a label on a point
drawn on top of its own, is left off (the point's hover says it).
Sizes in pixels, from the axes' ranges and the smallest plot the page draws: on a larger plot the labels,
whose pixel size is fixed, lie further apart. Pure."""

from __future__ import annotations

from typing import Sequence

CHAR_PX, LINE_PX = 6.5, 13.0  # a size-10 label: about the width of a character, the height of its line
GAP_PX = 10.0  # from a point's centre to its label: the largest marker's radius (the recommendation's star) and air
PLOT_PX = (480.0, 220.0)  # the smallest plot area (width, height) the chart gets: Plan page at 1280 px, legend below
# plotly's textposition, in order of choice: beside, above or below, then at a corner
PLACES = ("middle right", "middle left", "top center", "bottom center", "top right", "bottom right", "top left",
          "bottom left")

Box = tuple[float, float, float, float]  # left, bottom, right, top in pixels


def label_places(points: Sequence[tuple[float, float]], labels: Sequence[str], x_range: tuple[float, float],
                 y_range: tuple[float, float], plot_px: tuple[float, float] = PLOT_PX) -> list[str | None]:
    """Per point (x, y in data units, linear axes), where its label goes (a plotly textposition), or None where
    every place would overlap a label placed before it (points in the order given), a point or the edge."""
    width, height = plot_px
    to_px = [((x - x_range[0]) / (x_range[1] - x_range[0]) * width,
              (y - y_range[0]) / (y_range[1] - y_range[0]) * height) for x, y in points]
    taken: list[Box] = [(px - GAP_PX, py - GAP_PX, px + GAP_PX, py + GAP_PX) for px, py in to_px]
    places: list[str | None] = []
    for i, ((px, py), label) in enumerate(zip(to_px, labels)):
        if any(places[j] and labels[j] == label and abs(to_px[j][0] - px) < GAP_PX and abs(to_px[j][1] - py) < GAP_PX
               for j in range(i)):  # the same words on a point drawn on top of this one: said once
            places.append(None)
            continue
        boxes = _boxes(px, py, len(label) * CHAR_PX)
        clear = [place for place in PLACES if _inside(boxes[place], width, height)
                 and not any(_overlap(boxes[place], other) for other in taken)]
        places.append(clear[0] if clear else None)
        if clear:
            taken.append(boxes[clear[0]])
    return places


def _boxes(px: float, py: float, wide: float) -> dict[str, Box]:
    """The box a label `wide` pixels wide takes in each place around the point at (px, py)."""
    half, corner = LINE_PX / 2, GAP_PX * 0.7  # at a corner the label starts on the diagonal, GAP_PX from the centre
    return {"middle right": (px + GAP_PX, py - half, px + GAP_PX + wide, py + half),
            "middle left": (px - GAP_PX - wide, py - half, px - GAP_PX, py + half),
            "top center": (px - wide / 2, py + GAP_PX, px + wide / 2, py + GAP_PX + LINE_PX),
            "bottom center": (px - wide / 2, py - GAP_PX - LINE_PX, px + wide / 2, py - GAP_PX),
            "top right": (px + corner, py + corner, px + corner + wide, py + corner + LINE_PX),
            "bottom right": (px + corner, py - corner - LINE_PX, px + corner + wide, py - corner),
            "top left": (px - corner - wide, py + corner, px - corner, py + corner + LINE_PX),
            "bottom left": (px - corner - wide, py - corner - LINE_PX, px - corner, py - corner)}


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(box: Box, width: float, height: float) -> bool:
    return box[0] >= 0 and box[1] >= 0 and box[2] <= width and box[3] <= height
