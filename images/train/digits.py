"""Procedurally drawn digits (no download): seven-segment strokes, randomly bent,
shifted, scaled, thickened and noised, rasterised to 28x28. Classes are learnable
but not trivially separable, so a classifier shows a real loss curve."""

from __future__ import annotations

import numpy as np

# Segment endpoints in a unit box (x right, y down): a b c d e f g of a 7-segment digit.
_SEG = {
    "a": ((0.0, 0.0), (1.0, 0.0)),
    "b": ((1.0, 0.0), (1.0, 0.5)),
    "c": ((1.0, 0.5), (1.0, 1.0)),
    "d": ((0.0, 1.0), (1.0, 1.0)),
    "e": ((0.0, 0.5), (0.0, 1.0)),
    "f": ((0.0, 0.0), (0.0, 0.5)),
    "g": ((0.0, 0.5), (1.0, 0.5)),
}
_DIGITS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]
SIZE = 28


def _segments_to_image(segs: np.ndarray, thickness: float) -> np.ndarray:
    """segs: (k, 2, 2) pixel coords -> (SIZE, SIZE) intensities in [0, 1]."""
    ys, xs = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    pix = np.stack([xs.ravel(), ys.ravel()], axis=1)  # (P, 2)
    p0 = segs[:, 0][:, None, :]  # (k, 1, 2)
    d = (segs[:, 1] - segs[:, 0])[:, None, :]
    t = np.clip(((pix[None] - p0) * d).sum(-1) / np.maximum((d * d).sum(-1), 1e-6), 0.0, 1.0)
    dist = np.linalg.norm(pix[None] - (p0 + t[..., None] * d), axis=-1).min(axis=0)
    return np.clip(1.0 - (dist - thickness) / 1.5, 0.0, 1.0).reshape(SIZE, SIZE)


def make_digits(n: int, seed: int, noise: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """n images (float32, (n, 1, 28, 28), values in [0, 1]) and labels (int64, (n,))."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    images = np.empty((n, 1, SIZE, SIZE), dtype=np.float32)
    for i, label in enumerate(labels):
        segs = np.array([_SEG[s] for s in _DIGITS[label]], dtype=np.float32)
        segs = segs + rng.normal(0.0, 0.07, size=segs.shape)  # bent strokes
        angle = rng.normal(0.0, 0.15)
        shear = rng.normal(0.0, 0.15)
        rot = np.array(
            [[np.cos(angle), -np.sin(angle) + shear], [np.sin(angle), np.cos(angle)]],
            dtype=np.float32,
        )
        scale = rng.uniform(9.0, 13.0) * np.array([rng.uniform(0.7, 1.0), 1.4])
        centre = np.array([SIZE / 2, SIZE / 2]) + rng.normal(0.0, 1.5, size=2)
        pts = ((segs - 0.5) * scale) @ rot.T + centre
        img = _segments_to_image(pts.astype(np.float32), rng.uniform(0.4, 1.4))
        img += rng.normal(0.0, noise, size=img.shape)
        images[i, 0] = np.clip(img, 0.0, 1.0)
    return images, labels.astype(np.int64)
