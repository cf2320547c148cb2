/* Java's String.hashCode() computed straight from UTF-8 bytes, without building a string.
 *
 * RocketMQ stores String.hashCode() on disk: a consume-queue unit's tagsCode is the hash of the TAGS property and
 * an index item's keyHash is abs(hash of "topic#key"). Java hashes UTF-16 code units, so the result must be that of
 * the String `new String(bytes, StandardCharsets.UTF_8)` would produce from the stored bytes:
 *   - a code point >= U+10000 counts as its two surrogate units;
 *   - malformed input counts as U+FFFD, as many times, and over as many bytes, as Java's decoder replaces.
 *
 * Replacement rules matched (OpenJDK 17's String UTF-8 decoder, which differs from the Unicode "maximal subpart"
 * recommendation in one place; each case checked against java 17.0.15 on this machine by hashing the same bytes):
 *   - 0x80..0xC1 and 0xF8..0xFF as a lead byte: one U+FFFD for that byte.
 *   - 2-byte lead C2..DF not followed by a continuation byte (or at the end): one U+FFFD for the lead byte only;
 *     the next byte is decoded afresh.
 *   - 3-byte lead E0..EF with two bytes after it: if the second byte is not a continuation, or E0 is followed by
 *     80..9F (overlong), one U+FFFD for the lead alone; else if the third is not a continuation, one U+FFFD for
 *     the first two. A well-formed sequence that encodes a surrogate (ED A0..BF xx) gives ONE U+FFFD for all three
 *     bytes (this is where Java differs from "maximal subpart", which would give three).
 *   - 3-byte lead with fewer than two bytes after it: if a second byte is there and is bad (as above), one U+FFFD
 *     for the lead and the second byte is decoded afresh; otherwise one U+FFFD for the rest of the input.
 *   - 4-byte lead F0..F7 with three bytes after it: decoded when all are continuations and the value is in
 *     U+10000..U+10FFFF; otherwise one U+FFFD for the lead alone when the lead is F5..F7, or the second byte is
 *     not a continuation, or F0 is not followed by 90..BF (overlong), or F4 not by 80..8F (> U+10FFFF); else
 *     one U+FFFD for two bytes when the third is not a continuation, else for three (the fourth was bad).
 *   - 4-byte lead with fewer than three bytes after it: one U+FFFD for the lead alone when the lead is F5..F7
 *     or the second byte is bad (as above); otherwise one U+FFFD for lead and second byte, then the third byte
 *     is decoded afresh if it is not a continuation, else it is swallowed too (it is then the last byte).
 *
 * The arithmetic is done in uint32_t: h = 31*h + c wraps modulo 2^32 exactly like Java's int, without the
 * undefined behaviour of signed overflow in C; the final conversion to int32_t is two's complement on every
 * compiler we build with. Callers that need RocketMQ's abs() do it themselves (and must handle INT32_MIN). */
#ifndef RMQ_JAVA_HASH_H
#define RMQ_JAVA_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RMQ_JAVA_REPL 0xFFFDu

static inline int rmq_utf8_cont_(unsigned b) { return (b & 0xC0u) == 0x80u; }

static inline int32_t rmq_java_hash_utf8(const unsigned char *s, size_t n)
{
    uint32_t h = 0;
    size_t i = 0;

    while (i < n) {
        /* Tags and keys are mostly ASCII: four bytes per step as h*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3 shortens
         * the multiply chain fourfold. */
        while (n - i >= 4) {
            uint32_t w;
            memcpy(&w, s + i, 4);
            if (w & 0x80808080u)
                break;
            h = h * 923521u + (uint32_t)s[i] * 29791u + (uint32_t)s[i + 1] * 961u + (uint32_t)s[i + 2] * 31u +
                (uint32_t)s[i + 3];
            i += 4;
        }
        if (i >= n)
            break;

        unsigned b1 = s[i];
        if (b1 < 0x80u) {
            h = 31u * h + b1;
            i += 1;
        } else if (b1 >= 0xC2u && b1 <= 0xDFu) {
            if (i + 1 < n && rmq_utf8_cont_(s[i + 1])) {
                h = 31u * h + (((b1 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu));
                i += 2;
            } else {
                h = 31u * h + RMQ_JAVA_REPL;
                i += 1;
            }
        } else if (b1 >= 0xE0u && b1 <= 0xEFu) {
            if (i + 2 < n) {
                unsigned b2 = s[i + 1], b3 = s[i + 2];
                int bad2 = !rmq_utf8_cont_(b2) || (b1 == 0xE0u && b2 < 0xA0u);
                if (bad2) {
                    h = 31u * h + RMQ_JAVA_REPL;
                    i += 1;
                } else if (!rmq_utf8_cont_(b3)) {
                    h = 31u * h + RMQ_JAVA_REPL;
                    i += 2;
                } else {
                    uint32_t c = ((b1 & 0x0Fu) << 12) | ((b2 & 0x3Fu) << 6) | (b3 & 0x3Fu);
                    h = 31u * h + ((c >= 0xD800u && c <= 0xDFFFu) ? RMQ_JAVA_REPL : c);
                    i += 3;
                }
            } else {
                h = 31u * h + RMQ_JAVA_REPL;
                if (i + 1 < n && (!rmq_utf8_cont_(s[i + 1]) || (b1 == 0xE0u && s[i + 1] < 0xA0u)))
                    i += 1;
                else
                    i = n;
            }
        } else if (b1 >= 0xF0u && b1 <= 0xF7u) {
            if (i + 3 < n) {
                unsigned b2 = s[i + 1], b3 = s[i + 2], b4 = s[i + 3];
                int bad2 = b1 > 0xF4u || !rmq_utf8_cont_(b2) || (b1 == 0xF0u && b2 < 0x90u) ||
                           (b1 == 0xF4u && b2 > 0x8Fu);
                if (bad2) {
                    h = 31u * h + RMQ_JAVA_REPL;
                    i += 1;
                } else if (!rmq_utf8_cont_(b3)) {
                    h = 31u * h + RMQ_JAVA_REPL;
                    i += 2;
                } else if (!rmq_utf8_cont_(b4)) {
                    h = 31u * h + RMQ_JAVA_REPL;
                    i += 3;
                } else {
                    /* bad2 excluded overlong and > U+10FFFF forms, so this is a supplementary code point. */
                    uint32_t cp = ((b1 & 0x07u) << 18) | ((b2 & 0x3Fu) << 12) | ((b3 & 0x3Fu) << 6) | (b4 & 0x3Fu);
                    cp -= 0x10000u;
                    h = 31u * h + (0xD800u + (cp >> 10));
                    h = 31u * h + (0xDC00u + (cp & 0x3FFu));
                    i += 4;
                }
            } else {
                h = 31u * h + RMQ_JAVA_REPL;
                if (b1 > 0xF4u) {
                    i += 1;
                } else if (i + 1 < n) {
                    unsigned b2 = s[i + 1];
                    if (!rmq_utf8_cont_(b2) || (b1 == 0xF0u && b2 < 0x90u) || (b1 == 0xF4u && b2 > 0x8Fu))
                        i += 1;
                    else if (i + 2 < n && !rmq_utf8_cont_(s[i + 2]))
                        i += 2;
                    else
                        i = n;
                } else {
                    i = n;
                }
            }
        } else {
            h = 31u * h + RMQ_JAVA_REPL;
            i += 1;
        }
    }
    return (int32_t)h;
}

#endif /* RMQ_JAVA_HASH_H */
