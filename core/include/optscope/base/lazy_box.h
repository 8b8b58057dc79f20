// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <memory>

namespace optscope {

/// A T held by pointer and allocated only when written, in 8 bytes rather than sizeof(T): a checkpoint entry's tensor
/// description (112 bytes), which none of a value entry's million siblings use. Reads of an empty box see a
/// default-constructed T, so a reader need not know whether it was ever written; non-const access allocates it. A
/// value type: copies copy the T.
template<class T> class LazyBox
{
public:
    LazyBox() = default;
    LazyBox(T value) { *this = std::move(value); }
    LazyBox(const LazyBox& o)
        : m_value(o.m_value ? std::make_unique<T>(*o.m_value) : nullptr)
    { }
    LazyBox(LazyBox&&) noexcept = default;
    LazyBox& operator=(const LazyBox& o)
    {
        if (this != &o) m_value = o.m_value ? std::make_unique<T>(*o.m_value) : nullptr;
        return *this;
    }
    LazyBox& operator=(LazyBox&&) noexcept = default;
    LazyBox& operator=(T value)
    {
        if (m_value)
            *m_value = std::move(value);
        else
            m_value = std::make_unique<T>(std::move(value));
        return *this;
    }
    ~LazyBox() = default;

    const T& operator*() const { return m_value ? *m_value : empty(); }
    const T* operator->() const { return &**this; }
    T& operator*() { return *mutablePtr(); }
    T* operator->() { return mutablePtr(); }
    bool allocated() const { return m_value != nullptr; }
    /// back to 8 bytes: reads see a default T again
    void reset() { m_value.reset(); }

private:
    T* mutablePtr()
    {
        if (!m_value) m_value = std::make_unique<T>();
        return m_value.get();
    }
    static const T& empty()
    {
        static const T none {};
        return none;
    }
    std::unique_ptr<T> m_value;
};

} // namespace optscope
